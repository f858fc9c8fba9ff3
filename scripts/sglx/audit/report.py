"""The audit of one SBOM: its components matched against the OSV database, each hit marked by
the VEX statement that covers it (never dropped), and the policy's verdict.

Which components are matched, and how:
- Python distributions (`pkg:pypi`) in the PyPI ecosystem, by PEP 503 name and PEP 440 version;
- Debian packages by their source package and source version (OSV's Debian advisories name
  source packages), in `Debian:RELEASE` where the SBOM's operating system is Debian RELEASE.
A hit on a distribution whose RECORD holds no code gets sglx's own statement, `not_affected`
with the justification `vulnerable_code_not_present`.

The policy (`--fail-on LEVEL`) fails the audit (exit 1) when an advisory at or above LEVEL
affects a component and no statement marks it not_affected or fixed. An advisory whose severity
is unknown counts as high: a gate does not pass what it cannot rate.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sglx.audit import osv
from sglx.audit.vex import NOT_AFFECTED, Statement
from sglx.progress import Progress
from sglx_core.errors import SglxError
from sglx_core.report import Finding, Result, Table
from sglx_core.untrusted import parse_json

LEVELS = ("low", "medium", "high", "critical")
UNKNOWN_RANK = osv.RANKS["high"]
SUPPRESSED = frozenset({NOT_AFFECTED, "fixed"})


@dataclass(frozen=True)
class Matched:
    """A component of the SBOM, as the database names it."""

    purl: str
    name: str
    version: str
    ecosystem: str
    package: str  # the name advisories use (a Debian package's source package)
    package_version: str
    no_code: bool


def audit(
    sbom: str,
    sbom_path: str,
    db: Path,
    statements: Sequence[Statement],
    fail_on: str | None,
    progress: Progress,
) -> Result:
    components = components_of(sbom, sbom_path)
    wanted = {(e.partition(":")[0], osv.package_key(e, p)) for e, p in
              {(c.ecosystem, c.package) for c in components}}  # fmt: skip
    progress(f"reading the OSV database {db} for {len(wanted)} packages")
    database = osv.load(db, wanted)
    progress(f"{database.read} advisories read; matching {len(components)} components")
    rows, own = [], []
    for component in components:
        for hit in database.hits(component.ecosystem, component.package, component.package_version):
            ids = (hit.id, *hit.aliases)
            statement = next((s for s in statements if s.covers(ids, component.purl)), None)
            if statement is None and component.no_code:
                statement = Statement(hit.id, (component.purl,), NOT_AFFECTED,
                                      "vulnerable_code_not_present", "sglx")  # fmt: skip
                own.append(statement)
            rows.append((component, hit, statement))
    rows.sort(key=lambda r: (-_rank(r[1].severity), r[0].name, r[1].id))
    failing = [] if fail_on is None else [
        (c, h) for c, h, s in rows
        if (s is None or s.status not in SUPPRESSED) and _rank(h.severity) >= osv.RANKS[fail_on]
    ]  # fmt: skip
    return _result(components, database, rows, own, fail_on, failing, db)


def components_of(sbom: str, path: str) -> list[Matched]:
    from sglx.sbom.document import NO_CODE  # not at import: the CLI reads LEVELS from here

    document = parse_json(sbom, path=Path(path), what="SBOM")
    if not isinstance(document, dict) or document.get("bomFormat") != "CycloneDX":
        raise SglxError(f"{path}: not a CycloneDX SBOM", hint="give the SBOM sglx wrote")
    items = [c for c in document.get("components") or [] if isinstance(c, dict)]
    release = ""
    for item in items:
        if item.get("type") == "operating-system" and item.get("name") == "debian":
            release = str(item.get("version") or "")
    found = []
    for item in items:
        purl, name, version = str(item.get("purl") or ""), item.get("name"), item.get("version")
        if not isinstance(name, str) or not isinstance(version, str):
            continue
        props = {p.get("name"): str(p.get("value", "")) for p in item.get("properties") or []
                 if isinstance(p, dict)}  # fmt: skip
        if purl.startswith("pkg:pypi/"):
            no_code = props.get("sglx:code", "") == NO_CODE
            found.append(Matched(purl, name, version, "PyPI", name, version, no_code))
        elif purl.startswith("pkg:deb/debian/") and release:
            source, _, source_version = props.get("sglx:source", name).partition(" ")
            found.append(Matched(purl, name, version, f"Debian:{release}", source,
                                 source_version or version, False))  # fmt: skip
    return found


def _rank(severity: str) -> int:
    return osv.RANKS.get(severity, UNKNOWN_RANK)


def _result(
    components: list[Matched],
    database: osv.Database,
    rows: list[tuple[Matched, osv.Hit, Statement | None]],
    own: list[Statement],
    fail_on: str | None,
    failing: list[tuple[Matched, osv.Hit]],
    db: Path,
) -> Result:
    def status(statement: Statement | None) -> str:
        if statement is None:
            return "affected"
        return f"{statement.status} ({statement.justification}; {statement.source})"

    table = Table(
        ("component", "version", "advisory", "severity", "fixed in", "status"),
        tuple(
            (
                c.name,
                c.version,
                " ".join(dict.fromkeys((h.id, *h.aliases[:1]))),
                h.severity,
                h.fixed or "-",
                status(s),
            )
            for c, h, s in rows
        ),
        title=f"advisories ({len(rows)})",
    )
    affected = Counter(h.severity for _, h, s in rows if s is None or s.status not in SUPPRESSED)
    suppressed = sum(1 for _, _, s in rows if s is not None and s.status in SUPPRESSED)
    data = {
        "database": {"path": str(db), "advisories_read": database.read, "notes": database.notes},
        "components_matched": len(components),
        "advisories": [
            {
                "component": c.name,
                "version": c.version,
                "purl": c.purl,
                "id": h.id,
                "aliases": list(h.aliases),
                "summary": h.summary,
                "severity": h.severity,
                "fixed": h.fixed,
                "status": "affected" if s is None else s.status,
                "vex": None
                if s is None
                else {"status": s.status, "justification": s.justification, "source": s.source},
            }
            for c, h, s in rows
        ],
        "affected_by_severity": dict(sorted(affected.items())),
        "suppressed": suppressed,
        "sglx_vex": [
            {
                "vulnerability": s.vulnerability,
                "products": list(s.products),
                "status": s.status,
                "justification": s.justification,
            }
            for s in own
        ],
        "policy": {
            "fail_on": fail_on,
            "failed": bool(failing),
            "failing": [
                {"component": c.name, "id": h.id, "severity": h.severity} for c, h in failing
            ],
        },
    }
    lines = [
        f"{len(components)} components matched against {database.read} advisories: "
        f"{sum(affected.values())} affecting, {suppressed} marked not affected or fixed by VEX"
    ]
    findings = tuple(
        Finding(
            "advisory",
            f"{c.name} {c.version}: {h.id} ({h.severity}) affects it"
            + (f"; fixed in {h.fixed}" if h.fixed else ""),
            hint="update the package and rebuild, or state why it does not apply in a VEX "
            "document (--vex FILE)",
        )
        for c, h in failing
    )
    return Result(("bundle", "audit"), data=data, tables=(table,) if rows else (),
                  lines=tuple(lines + database.notes[:20]), findings=findings)  # fmt: skip
