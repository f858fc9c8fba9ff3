"""sglx: the host tool of the sglx distribution (profiles, images, bundles, scans, rollouts)."""

__version__ = "0.1.0"
