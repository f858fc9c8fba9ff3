"""sglx's image runtime: the programs an sglx image runs around the SGLang server (its
entrypoint, preflight, the serving gate's runners, the collective smoke, the caches), as opposed
to the platform plugin (`sglx_platform`) that SGLang loads into its own processes."""

__version__ = "0.1.0"
