"""`sglx bundle audit`: a bundle's SBOM matched, offline, against an OSV database the site
carries in (osv.py), with VEX statements marking what does not apply (vex.py); the report and
its policy (report.py)."""
