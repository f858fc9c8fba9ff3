"""Attestations a site's reviewers verify with their own tools, offline.

Everything is signed with one ECDSA P-256 key the site controls (sglx.attest.keys):
- in-toto Statements (sglx.attest.statements): SLSA Provenance v1 over every file of a bundle,
  and the image scan's result as a Test Result;
- each in a Sigstore bundle v0.3 (sglx.attest.sigstore_bundle), which `cosign
  verify-blob-attestation --key` checks without a transparency log;
- the same files as an in-toto layout and link (sglx.attest.in_toto_layout), which
  `in-toto-verify` checks against the files on disk.

This package knows nothing of the bundle's layout: sglx.bundle.attestations says which files
are subjects and where the documents go.
"""
