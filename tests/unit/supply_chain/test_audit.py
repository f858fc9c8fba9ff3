"""`sglx bundle audit`'s matching (sglx.audit) against a small OSV database made here: hits,
misses and range boundaries in PyPI's, Debian's and SemVer's orderings, a release's advisory
kept from another release, severities from a database's word and from a CVSS vector, VEX
statements (the site's OpenVEX, sglx's own for a distribution with no code) shown, never
dropped, and the --fail-on policy."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import pytest

from sglx.audit import osv, vex
from sglx.audit.report import audit
from sglx.progress import Progress
from sglx.sbom.contents import (
    DebianPackage,
    ImageContents,
    OperatingSystem,
    PythonDistribution,
)
from sglx.sbom.document import Subject, build_bom, to_json
from sglx_core.errors import SglxError

SITE = "/opt/venv/lib/python3.11/site-packages"
CRITICAL_VECTOR = "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H"


def _dist(name: str, version: str, has_code: bool = True) -> PythonDistribution:
    return PythonDistribution(name, version, SITE, (), has_code=has_code)


def _deb(name: str, version: str, source: str, source_version: str) -> DebianPackage:
    return DebianPackage(name, version, "amd64", source, source_version, ())


CONTENTS = ImageContents(
    debian=(
        _deb("libc6", "2.36-9+deb12u4", "glibc", "2.36-9+deb12u4"),
        _deb("bash", "5.2.15-2+b2", "bash", "5.2.15-2"),  # a binNMU: the source's version counts
        _deb("zlib1g", "1:1.2.13.dfsg-1", "zlib", "1:1.2.13.dfsg-1"),
    ),
    python=(
        _dist("Jinja2", "3.1.2"),
        _dist("urllib3", "2.0.7"),
        _dist("requests", "2.31.0"),
        _dist("idna", "3.7"),
        _dist("torch", "2.13.0+cpu"),
        _dist("stand-in", "0.1", has_code=False),
        _dist("semverpkg", "1.4.0"),
    ),
    loose_elf=(),
    os=OperatingSystem("debian", "12"),
)


def _advisory(id_: str, ecosystem: str, name: str, events: list[dict[str, str]],
              **extra: Any) -> dict[str, Any]:  # fmt: skip
    kind = extra.pop("range_type", "ECOSYSTEM")
    return {
        "id": id_,
        "modified": "2026-11-01T00:00:00Z",
        "summary": f"{name} advisory {id_}",
        "affected": [
            {
                "package": {"ecosystem": ecosystem, "name": name},
                "ranges": [{"type": kind, "events": events}],
                **extra.pop("affected_extra", {}),
            }
        ],
        **extra,
    }


ADVISORIES = [
    # PyPI, named as published (jinja2 vs Jinja2): fixed above ours -> affected, fix named
    _advisory("GHSA-jjjj", "PyPI", "jinja2", [{"introduced": "0"}, {"fixed": "3.1.3"}],
              aliases=["CVE-2024-0001"], database_specific={"severity": "HIGH"}),
    # fixed AT our version -> not affected (the boundary)
    _advisory("GHSA-uuuu", "PyPI", "urllib3", [{"introduced": "2.0.0"}, {"fixed": "2.0.7"}],
              database_specific={"severity": "MODERATE"}),
    # last_affected AT our version -> affected; the site's OpenVEX says it does not apply
    _advisory("PYSEC-rrrr", "PyPI", "requests", [{"introduced": "2.3.0"},
              {"last_affected": "2.31.0"}], aliases=["CVE-2024-0002"],
              database_specific={"severity": "MODERATE"}),
    # introduced AT our version -> affected; severity from the CVSS vector
    _advisory("GHSA-iiii", "PyPI", "idna", [{"introduced": "3.7"}, {"fixed": "3.8"}],
              severity=[{"type": "CVSS_V3", "score": CRITICAL_VECTOR}]),
    # a range below ours -> a miss (PEP 440: 2.13.0+cpu is above 2.5)
    _advisory("GHSA-tttt", "PyPI", "torch", [{"introduced": "2.0"}, {"fixed": "2.5"}]),
    # a distribution holding no code: sglx's own VEX
    _advisory("GHSA-ssss", "PyPI", "stand-in", [{"introduced": "0"}],
              database_specific={"severity": "CRITICAL"}),
    # SemVer ordering: a release candidate of the fix is below 1.4.0 -> not affected
    _advisory("GHSA-vvvv", "PyPI", "semverpkg", [{"introduced": "1.0.0"},
              {"fixed": "1.4.0-rc.1"}], range_type="SEMVER"),
    # Debian 12, by source package, dpkg's ordering: deb12u4 < deb12u7 -> affected; no severity
    _advisory("DEBIAN-CVE-2025-1", "Debian:12", "glibc", [{"introduced": "0"},
              {"fixed": "2.36-9+deb12u7"}]),
    # the same package in Debian 11's ecosystem: not ours
    _advisory("DLA-1", "Debian:11", "glibc", [{"introduced": "0"}, {"fixed": "9.0"}]),
    # an epoch: 5.2.15-2 is below 1:5.0 in dpkg's ordering (not in a string's) -> affected
    _advisory("DEBIAN-CVE-2025-2", "Debian:12", "bash", [{"introduced": "0"},
              {"fixed": "1:5.0-1"}], database_specific={"severity": "low"}),
    # the binary package's name is not the source's: no match by binary name
    _advisory("DEBIAN-CVE-2025-3", "Debian:12", "libc6", [{"introduced": "0"}]),
    # withdrawn: never reported
    _advisory("GHSA-wwww", "PyPI", "jinja2", [{"introduced": "0"}],
              withdrawn="2026-01-01T00:00:00Z"),
]  # fmt: skip
SITE_VEX = {
    "@context": "https://openvex.dev/ns/v0.2.0",
    "statements": [{
        "vulnerability": {"name": "CVE-2024-0002"},
        "products": [{"@id": "pkg:pypi/requests"}],  # no version: every version
        "status": "not_affected",
        "justification": "vulnerable_code_not_in_execute_path",
    }],
}  # fmt: skip


def _sbom() -> str:
    subject = Subject("sglx/cpu:test", "sha256:" + "ab" * 32, {}, {})
    return to_json(build_bom(subject, CONTENTS))


@pytest.fixture
def db(tmp_path: Path) -> Path:
    folder = tmp_path / "osv"
    (folder / "PyPI").mkdir(parents=True)
    with zipfile.ZipFile(folder / "Debian-all.zip", "w") as archive:  # an OSV export
        for advisory in ADVISORIES:
            ecosystem = advisory["affected"][0]["package"]["ecosystem"]
            if ecosystem.startswith("Debian"):
                archive.writestr(f"{advisory['id']}.json", json.dumps(advisory))
            else:
                (folder / "PyPI" / f"{advisory['id']}.json").write_text(json.dumps(advisory))
    return folder


def _run(db: Path, tmp_path: Path, fail_on: str | None = None) -> Any:
    (tmp_path / "site.vex.json").write_text(json.dumps(SITE_VEX))
    statements = vex.read(tmp_path / "site.vex.json")
    return audit(_sbom(), "sbom.cdx.json", db, statements, fail_on, Progress("t", quiet=True))


def test_hits_misses_boundaries_and_statements(db: Path, tmp_path: Path) -> None:
    result = _run(db, tmp_path)
    assert result.exit_code == 0 and not result.findings  # no policy: a report
    rows = {(a["component"], a["id"]): a for a in result.data["advisories"]}
    assert set(rows) == {
        ("Jinja2", "GHSA-jjjj"), ("requests", "PYSEC-rrrr"), ("idna", "GHSA-iiii"),
        ("stand-in", "GHSA-ssss"), ("libc6", "DEBIAN-CVE-2025-1"),
        ("bash", "DEBIAN-CVE-2025-2"),
    }  # fmt: skip
    jinja = rows[("Jinja2", "GHSA-jjjj")]
    assert (jinja["severity"], jinja["fixed"], jinja["status"]) == ("high", "3.1.3", "affected")
    assert rows[("idna", "GHSA-iiii")]["severity"] == "critical"  # from the CVSS vector
    assert rows[("libc6", "DEBIAN-CVE-2025-1")]["severity"] == "unknown"
    assert rows[("libc6", "DEBIAN-CVE-2025-1")]["fixed"] == "2.36-9+deb12u7"
    assert rows[("bash", "DEBIAN-CVE-2025-2")]["severity"] == "low"
    requests = rows[("requests", "PYSEC-rrrr")]
    assert requests["status"] == "not_affected"  # shown, with why and whose word it is
    assert requests["vex"]["justification"] == "vulnerable_code_not_in_execute_path"
    assert requests["vex"]["source"].endswith("site.vex.json")
    stand_in = rows[("stand-in", "GHSA-ssss")]
    assert stand_in["vex"] == {"status": "not_affected", "source": "sglx",
                               "justification": "vulnerable_code_not_present"}  # fmt: skip
    assert result.data["sglx_vex"][0]["products"] == ["pkg:pypi/stand-in@0.1"]
    assert result.data["affected_by_severity"] == {"critical": 1, "high": 1, "low": 1,
                                                   "unknown": 1}  # fmt: skip
    assert result.data["suppressed"] == 2
    assert result.data["database"]["advisories_read"] == len(ADVISORIES)


@pytest.mark.parametrize(
    ("level", "failing"),
    [
        ("critical", {"idna"}),
        ("high", {"idna", "Jinja2", "libc6"}),  # unknown severity counts as high
        ("low", {"idna", "Jinja2", "libc6", "bash"}),  # never the suppressed two
    ],
)
def test_fail_on_fails_on_unsuppressed_advisories_at_or_above_it(
    db: Path, tmp_path: Path, level: str, failing: set[str]
) -> None:
    result = _run(db, tmp_path, level)
    assert result.exit_code == 1
    assert {f.message.split(" ")[0] for f in result.findings} == failing
    policy = result.data["policy"]
    assert (policy["fail_on"], policy["failed"]) == (level, True)
    assert {f["component"] for f in policy["failing"]} == failing  # what the rollout names


def test_versions_no_ordering_reads_are_noted_not_guessed(tmp_path: Path) -> None:
    folder = tmp_path / "osv"
    folder.mkdir()
    broken = _advisory(
        "GHSA-bad", "PyPI", "jinja2", [{"introduced": "0"}, {"fixed": "not a version!"}]
    )
    (folder / "a.json").write_text(json.dumps(broken))
    result = audit(_sbom(), "s", folder, [], "low", Progress("t", quiet=True))
    assert result.data["advisories"] == [] and result.exit_code == 0
    assert "GHSA-bad: a ECOSYSTEM range of PyPI could not be read" in " ".join(result.lines)


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda d: (d / "x.json").write_text("[1, 2]"), "not an OSV advisory"),
        (lambda d: (d / "x.json").write_text('{"id": 1' + "0" * 50 + "}"), "integer of"),
        (lambda d: (d / "x.zip").write_bytes(b"PK\x03\x04 not a zip"), "not a readable zip"),
        (lambda d: None, "holds no OSV advisory"),
    ],
)
def test_a_bad_database_is_refused_naming_the_file(tmp_path: Path, make: Any, said: str) -> None:
    folder = tmp_path / "osv"
    folder.mkdir()
    make(folder)
    with pytest.raises(SglxError, match=said):
        osv.load(folder, {("PyPI", "jinja2")})


def test_a_zip_member_whose_size_lies_is_cut_at_the_bound(tmp_path: Path) -> None:
    big = tmp_path / "all.zip"
    with zipfile.ZipFile(big, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("huge.json", b" " * (osv.MAX_ADVISORY_BYTES + 10))
    with pytest.raises(SglxError, match="larger than any OSV advisory"):
        osv.load(big, set())


def test_cyclonedx_vex_reads_as_statements(tmp_path: Path) -> None:
    document = {"bomFormat": "CycloneDX", "specVersion": "1.6", "vulnerabilities": [
        {"id": "CVE-2024-0001", "analysis": {"state": "false_positive", "detail": "checked"},
         "affects": [{"ref": "pkg:pypi/jinja2@3.1.2"}]},
        {"id": "CVE-2024-9", "analysis": {"state": "in_triage"}, "affects": []},
    ]}  # fmt: skip
    (tmp_path / "v.json").write_text(json.dumps(document))
    first, second = vex.read(tmp_path / "v.json")
    assert (first.status, first.justification) == ("not_affected", "checked")
    assert first.covers(["GHSA-jjjj", "CVE-2024-0001"], "pkg:pypi/jinja2@3.1.2")
    assert not first.covers(["CVE-2024-0001"], "pkg:pypi/jinja2@3.1.3")
    assert second.status == "under_investigation"
    (tmp_path / "bad.json").write_text('{"statements": [{"vulnerability": 3}]}')
    with pytest.raises(SglxError, match="needs a vulnerability name and a status"):
        vex.read(tmp_path / "bad.json")
