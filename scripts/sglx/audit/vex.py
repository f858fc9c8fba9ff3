"""VEX statements: which advisories do not apply to which component, and why. Read from
OpenVEX documents (https://github.com/openvex/spec, `statements`) and CycloneDX VEX
(`vulnerabilities[].analysis`), given by the site or carried in the bundle; and made by sglx
where it can show an advisory does not apply (a distribution whose RECORD holds no code).

A statement names a vulnerability (an advisory id or one of its aliases, `CVE-...`) and
products by purl; a purl without a version covers every version of the package."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglx_core.errors import SglxError
from sglx_core.untrusted import read_json

MAX_VEX_BYTES = 64 << 20
NOT_AFFECTED = "not_affected"
# CycloneDX's analysis states, as OpenVEX's statuses
CYCLONEDX_STATES = {
    "not_affected": NOT_AFFECTED,
    "false_positive": NOT_AFFECTED,
    "resolved": "fixed",
    "resolved_with_pedigree": "fixed",
    "exploitable": "affected",
    "in_triage": "under_investigation",
}
STATUSES = frozenset({NOT_AFFECTED, "affected", "fixed", "under_investigation"})
FIX = "give an OpenVEX document (`statements`) or a CycloneDX VEX (`vulnerabilities`)"


@dataclass(frozen=True)
class Statement:
    vulnerability: str
    products: tuple[str, ...]  # purls
    status: str
    justification: str
    source: str  # the file it came from, or "sglx"

    def covers(self, ids: Iterable[str], purl: str) -> bool:
        if self.vulnerability not in set(ids):
            return False
        return any(_same_package(product, purl) for product in self.products)


def read(path: Path) -> list[Statement]:
    document = read_json(path, what="VEX document", max_bytes=MAX_VEX_BYTES, hint=FIX)
    if not isinstance(document, dict):
        raise SglxError(f"{path}: a VEX document is a JSON object", hint=FIX, code="usage")
    if isinstance(document.get("statements"), list):
        return [_openvex(s, str(path)) for s in document["statements"]]
    if isinstance(document.get("vulnerabilities"), list):
        return [s for v in document["vulnerabilities"] for s in _cyclonedx(v, str(path))]
    raise SglxError(f"{path}: neither OpenVEX nor CycloneDX VEX", hint=FIX, code="usage")


def _openvex(statement: Any, source: str) -> Statement:
    if not isinstance(statement, dict):
        raise SglxError(f"{source}: a statement is not a JSON object", hint=FIX, code="usage")
    vulnerability = statement.get("vulnerability")
    name = vulnerability.get("name") if isinstance(vulnerability, dict) else vulnerability
    listed = _list(statement.get("products"), "a statement's products", source)
    products = [p.get("@id") if isinstance(p, dict) else p for p in listed]
    status = statement.get("status")
    if not isinstance(name, str) or not isinstance(status, str) or status not in STATUSES:
        raise SglxError(
            f"{source}: a statement needs a vulnerability name and a status of "
            f"{', '.join(sorted(STATUSES))}",
            hint=FIX,
            code="usage",
        )
    justification = statement.get("justification") or statement.get("impact_statement") or ""
    return Statement(name, tuple(str(p) for p in products if isinstance(p, str)), status,
                     str(justification), source)  # fmt: skip


def _cyclonedx(vulnerability: Any, source: str) -> list[Statement]:
    if not isinstance(vulnerability, dict) or not isinstance(vulnerability.get("id"), str):
        raise SglxError(f"{source}: a vulnerability needs an id", hint=FIX, code="usage")
    analysis = vulnerability.get("analysis") or {}
    if not isinstance(analysis, dict):
        raise SglxError(f"{source}: a vulnerability's analysis is not an object", hint=FIX,
                        code="usage")  # fmt: skip
    status = CYCLONEDX_STATES.get(str(analysis.get("state", "")))
    if status is None:
        return []
    affects = _list(vulnerability.get("affects"), "a vulnerability's affects", source)
    products = [a.get("ref") for a in affects if isinstance(a, dict)]
    justification = analysis.get("justification") or analysis.get("detail") or ""
    return [Statement(vulnerability["id"], tuple(str(p) for p in products if isinstance(p, str)),
                      status, str(justification), source)]  # fmt: skip


def _list(value: Any, what: str, source: str) -> list[Any]:
    """`value` when it is a list, [] when absent; anything else is refused naming `what`."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise SglxError(f"{source}: {what} is not a list", hint=FIX, code="usage")
    return value


def _same_package(product: str, purl: str) -> bool:
    """`product` names `purl`: the same purl, or the same package with no version given."""
    if product == purl:
        return True
    bare, base = product.partition("?")[0], purl.partition("?")[0]
    return "@" not in bare and base.partition("@")[0] == bare
