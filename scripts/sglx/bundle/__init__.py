"""Air-gapped bundles: one folder (or one tar of it) carrying everything one arch serves with.

`create` streams the image into sha256-checked chunks with a manifest (`bundle.json`) and a
coreutils-checkable `SHA256SUMS`; `verify` re-checks every byte offline and re-runs the
dependency scan; `install` loads, places and records work so that a re-run redoes nothing.
The format is documented in docs/reference/bundle.md.
"""
