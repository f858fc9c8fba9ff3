"""sglx's core: what the image's runtime (the platform plugin) and the host tool stand on.

Profile loading and its schema, the report and error types, base facts and the base probe, the
rootfs and library search, bounded reads of untrusted files, atomic writes and the repository's
paths. It imports nothing of `sglx` (the host tool) nor of `sglx_platform` (the plugin): the
contracts in pyproject.toml (`[tool.importlinter]`, checked by `make lint`) hold it to that.
"""
