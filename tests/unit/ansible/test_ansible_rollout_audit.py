"""The audit as a gate: rollout.yml's audit play (the sglx_rollout role's entry point `audit`)
and what the summary says of the bundle's signature and the audit policy, run by the real
ansible-playbook over a local inventory with `--tags sglx_rollout_audit,sglx_rollout_summary`,
so no host is changed; and `sglx bundle verify --audit-db`, the same gate without Ansible.

The audit is the real `sglx bundle audit` of this venv (the control node's sglx) on a bundle
made by hand around an SBOM that lists Jinja2 3.1.2 and idna 3.7, against an OSV database made
for the test: a HIGH advisory on Jinja2 and a MODERATE one on idna. Under `fail on high` the
rollout stops before staging, naming the advisory; a site VEX statement that says the Jinja2
advisory does not apply lets it through, and the summary says so.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.ansible_play import rollout_playbook
from helpers.bundles import hand_bundle

from sglx.sbom.contents import ImageContents, OperatingSystem, PythonDistribution
from sglx.sbom.document import Subject, build_bom, to_json

BIN = Path(sys.executable).parent
DIGEST = "sha256:" + "a" * 64
IMAGE = "sha256:" + "b" * 64
SITE = "/opt/venv/lib/python3.11/site-packages"


def advisory(id_: str, name: str, fixed: str, severity: str) -> dict[str, Any]:
    return {
        "id": id_,
        "modified": "2026-11-01T00:00:00Z",
        "aliases": [f"CVE-{id_}"],
        "affected": [{
            "package": {"ecosystem": "PyPI", "name": name},
            "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": fixed}]}],
        }],
        "database_specific": {"severity": severity},
    }  # fmt: skip


@pytest.fixture
def site(tmp_path: Path) -> dict[str, Path]:
    """The bundle (on the 'control node'), the OSV database and a VEX document."""
    contents = ImageContents(
        debian=(),
        python=(PythonDistribution("Jinja2", "3.1.2", SITE, ()),
                PythonDistribution("idna", "3.7", SITE, ())),
        loose_elf=(),
        os=OperatingSystem("debian", "12"),
    )  # fmt: skip
    sbom = to_json(build_bom(Subject("sglx/cpu:test", "sha256:" + "ab" * 32, {}, {}), contents))
    archive = tmp_path / "image.tar"
    archive.write_bytes(os.urandom(4096))
    bundle = hand_bundle(tmp_path / "bundle", archive, {"meta/sbom.cdx.json": sbom.encode()}, 4096)
    db = tmp_path / "osv"
    db.mkdir()
    for entry in (advisory("GHSA-jjjj", "jinja2", "3.1.3", "HIGH"),
                  advisory("GHSA-iiii", "idna", "3.8", "MODERATE")):  # fmt: skip
        (db / f"{entry['id']}.json").write_text(json.dumps(entry))
    vex = tmp_path / "site.vex.json"
    vex.write_text(json.dumps({
        "@context": "https://openvex.dev/ns/v0.2.0",
        "statements": [{"vulnerability": {"name": "CVE-GHSA-jjjj"},
                        "products": [{"@id": "pkg:pypi/jinja2"}], "status": "not_affected",
                        "justification": "vulnerable_code_not_in_execute_path"}],
    }))  # fmt: skip
    return {"bundle": bundle, "db": db, "vex": vex}


def play(tmp_path: Path, extra: dict[str, Any]) -> tuple[int, str]:
    record = tmp_path / "deployed.json"
    record.write_text(json.dumps({"bundle_digest": DIGEST, "image_id": IMAGE, "unit": "u"}))
    host = {"sglang_service_state_file": str(record)}
    variables = json.dumps({"sglx_rollout_sglx": str(BIN / "sglx"), **extra})
    return rollout_playbook(tmp_path, {"host-a": host}, "-e", variables,
                            "--tags", "sglx_rollout_audit,sglx_rollout_summary")  # fmt: skip


def test_without_a_policy_the_summary_says_the_audit_is_off(tmp_path: Path) -> None:
    code, out = play(tmp_path, {})
    assert code == 0, out
    assert "audit: off (sglx_bundle_audit_fail_on unset)" in out, out
    assert "bundle signature: not checked on this run" in out, out


def test_an_unsuppressed_high_advisory_stops_the_rollout_before_staging(
    tmp_path: Path, site: dict[str, Path]
) -> None:
    policy = {"sglx_bundle_src": str(site["bundle"]), "sglx_bundle_audit_db": str(site["db"]),
              "sglx_bundle_audit_fail_on": "high"}  # fmt: skip
    code, out = play(tmp_path, policy)
    assert code != 0, out
    assert "fails the site's policy (fail on high): GHSA-jjjj affect the bundle" in out, out
    assert "nothing was copied" in out and "host-a: " not in out, "the summary never ran"
    # The site's VEX says the advisory does not apply: the rollout goes on, and says so.
    code, out = play(tmp_path, {**policy, "sglx_bundle_audit_vex": [str(site["vex"])]})
    assert code == 0, out
    assert (
        f"audit: fail on high against {site['db']} (2 advisories read): 1 affecting, 1 marked "
        "not affected or fixed by VEX, 0 at or above high"
    ) in out, out


def test_a_policy_without_its_database_is_refused_naming_the_variable(
    tmp_path: Path, site: dict[str, Path]
) -> None:
    code, out = play(tmp_path, {"sglx_bundle_src": str(site["bundle"]),
                                "sglx_bundle_audit_fail_on": "high"})  # fmt: skip
    assert code != 0, out
    assert "sglx_bundle_audit_db, now ''" in out, out
    code, out = play(tmp_path, {"sglx_bundle_src": str(site["bundle"]),
                                "sglx_bundle_audit_db": str(tmp_path / "missing"),
                                "sglx_bundle_audit_fail_on": "high"})  # fmt: skip
    assert code != 0 and "sglx bundle audit of" in out and "failed (exit 2)" in out, out


def test_bundle_verify_applies_the_same_policy(site: dict[str, Path]) -> None:
    """The gate without Ansible: `sglx bundle verify --audit-db` audits once the files verified."""
    from sglx.cli import main

    args = ["bundle", "verify", str(site["bundle"]), "--no-scan", "--audit-db", str(site["db"])]
    assert main([*args, "-q"]) == 0  # report only
    assert main([*args, "--audit-fail-on", "high", "-q"]) == 1
    assert main([*args, "--audit-fail-on", "high", "--audit-vex", str(site["vex"]), "-q"]) == 0
    assert main([*args, "--audit-fail-on", "critical", "-q"]) == 0
    assert main(["bundle", "verify", str(site["bundle"]), "--audit-fail-on", "high", "-q"]) == 2
