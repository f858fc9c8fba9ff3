"""What the server is set up with at start, computed from the hardware, the model and the arch
profile: which devices these are (`hardware`), what the model is (`model`), whether it fits
(`capacity`), which serving profile applies (`select`) and where each final setting came from
(`resolve`).

Pure Python on the core only: the image's `sglx-serve --dry-run` and the host tool's
`sglx hosts check` both answer from here without importing torch or sglang.
"""
