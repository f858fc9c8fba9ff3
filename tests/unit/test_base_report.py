"""The base report (profile vs what the base declares) and the env floors, without an engine."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sglx.cli import main
from sglx.image.base_facts import compare, labels
from sglx.image.base_probe import filter_lock
from sglx.profile import load_profile
from sglx_platform.preflight.base_check import check_base
from sglx_platform.preflight.checks import Check
from sglx_platform.preflight.env_floors import check_env_floors

UPSTREAM: dict[str, Any] = {
    "python": "3.12.3",
    "rocm": "7.2.0-43",
    "distributions": {
        "sglang": "0.5.23",
        "torch": "2.9.1+rocm7.2.0.lw.git5d5e6a6e",
        "sglang-kernel": "0.4.10",
        "amd-aiter": "0.1.7",
        "triton": "3.7.0+amd.rocm7.2.0.git89002410",
        "torchvision": "0.24.1+rocm7.2.0",
    },
}
RECORD = {"ref": "lmsysorg/sglang:v0.5.23-rocm720-mi30x", "digest": "sha256:" + "a" * 64}


def test_gfx942_names_the_upstream_base_and_what_it_provides() -> None:
    profile = load_profile("gfx942")
    assert profile.base.ref == "lmsysorg/sglang:v0.5.23-rocm720-mi30x"
    assert profile.sglang.wheel == "base"
    assert {"sglang", "sglang-kernel", "amd-aiter", "triton", "torch"} <= set(profile.base.provides)
    assert profile.base.rocm == ">=7.2,<7.3"
    assert load_profile("gfx1151").base.ref.startswith("rocm/sgl-dev:v0.5.23-rocm724-gfx1151")


@pytest.mark.parametrize(
    ("arch", "ref"),
    [
        ("gfx942", "lmsysorg/sglang:v0.5.23-rocm720-mi30x"),
        ("gfx950", "lmsysorg/sglang:v0.5.23-rocm720-mi35x"),
        ("gfx1151", "rocm/sgl-dev:v0.5.23-rocm724-gfx1151"),
    ],
)
def test_arch_show_json_names_the_upstream_base_and_what_it_provides(
    arch: str, ref: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """What a site operator reads before carrying the base in: the ref, how to obtain it
    offline, and what the build will take from it instead of the lock."""
    assert main(["arch", "show", arch, "--json"]) == 0
    out = capsys.readouterr().out
    envelope = json.loads(out)
    assert envelope["status"] == "ok"
    profile = envelope["data"]["profile"]
    assert profile["sglang"] == {"version": "0.5.23", "wheel": "base"}
    base = profile["base"]
    assert base["ref"].startswith(ref)
    assert base["source"] == "load"
    assert set(base["provides"]) >= {"sglang", "sglang-kernel", "amd-aiter", "triton", "torch"}
    assert base["rocm"].startswith(">=7.2")
    assert "docker save" in base["obtain"]
    assert "sglx base load" in base["obtain"]
    assert "Traceback" not in out


def test_an_upstream_base_matches_its_profile() -> None:
    facts = compare(load_profile("gfx942"), UPSTREAM)
    assert all(f.matches in (True, None) for f in facts), facts
    assert labels(facts)["io.sglx.base.matches"] == "true"
    assert labels(facts)["io.sglx.base.rocm"] == "7.2.0-43"


def test_preflight_reports_the_base_with_its_digest() -> None:
    checks: list[Check] = []
    check_base(load_profile("gfx942"), checks, probe=UPSTREAM, report=RECORD)
    [base] = checks
    assert base.status == "pass"
    assert "lmsysorg/sglang:v0.5.23-rocm720-mi30x (sha256:aaaa" in base.detail
    assert "sglang 0.5.23" in base.detail and "rocm 7.2.0-43" in base.detail


def test_preflight_fails_a_base_whose_versions_differ() -> None:
    probe: dict[str, Any] = {
        **UPSTREAM,
        "rocm": "6.4.1",
        "distributions": {**UPSTREAM["distributions"], "sglang": "0.5.22"},
    }
    checks: list[Check] = []
    check_base(load_profile("gfx942"), checks, probe=probe, report=RECORD)
    [base] = checks
    assert base.status == "fail"
    assert base.failure is not None and base.failure.value == "config_refused"
    assert "sglang is 0.5.22, the profile expects 0.5.23" in base.detail
    assert "rocm is 6.4.1, the profile expects >=7.2,<7.3" in base.detail
    assert base.fix is not None and "sglx base load" in base.fix


def test_preflight_warns_about_provided_packages_the_base_lacks() -> None:
    probe = {**UPSTREAM, "distributions": {"sglang": "0.5.23", "torch": "2.9.1"}}
    checks: list[Check] = []
    check_base(load_profile("gfx942"), checks, probe=probe, report=RECORD)
    assert [c.status for c in checks] == ["pass", "warn"]
    assert "the base lacks sglang-kernel, amd-aiter" in checks[1].detail


def test_outside_an_image_there_is_no_base_to_report(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SGLX_PROFILE", str(tmp_path / "arch.yaml"))
    checks: list[Check] = []
    check_base(load_profile("gfx942"), checks, probe=UPSTREAM)
    assert [(c.name, c.status) for c in checks] == [("base", "skip")]


def test_the_build_keeps_what_the_base_has() -> None:
    lock = (
        "# header\n"
        "pydantic==2.14.4 \\\n    --hash=sha256:aa\n"
        "loguru==0.7.3 \\\n    --hash=sha256:bb\n"
    )
    text, missing, kept = filter_lock(lock, {"pydantic": "2.11.0"})
    assert text == "loguru==0.7.3 \\\n    --hash=sha256:bb\n"
    assert missing == ["loguru==0.7.3"]
    assert kept == ["pydantic 2.11.0 (lock: 2.14.4)"]


@pytest.mark.parametrize(
    ("environ", "status"),
    [
        ({"SGLANG_ROCM_USE_MULTI_STREAM": "1"}, "warn"),
        ({"SGLANG_ROCM_USE_MULTI_STREAM": "1", "GPU_MAX_HW_QUEUES": "2"}, "warn"),
        ({"SGLANG_ROCM_USE_MULTI_STREAM": "1", "GPU_MAX_HW_QUEUES": "5"}, "pass"),
        ({"GPU_MAX_HW_QUEUES": "2"}, None),
    ],
)
def test_multi_stream_needs_five_hardware_queues(environ: dict[str, str], status: str) -> None:
    checks: list[Check] = []
    check_env_floors(load_profile("gfx942"), checks, environ)
    if status is None:
        assert checks == []
        return
    [check] = checks
    assert (check.name, check.status) == ("env GPU_MAX_HW_QUEUES", status)
    if status == "warn":
        assert "serializes with fewer than 5 HIP hardware queues" in check.detail
        assert (
            check.fix
            == "set GPU_MAX_HW_QUEUES=5 for this server, or unset SGLANG_ROCM_USE_MULTI_STREAM"
        )


def test_no_lock_or_profile_claims_sglang_is_cp311_only(repo: Any) -> None:
    for path in [*repo.glob("images/**/*.yaml"), *repo.glob("bundles/locks/*.txt")]:
        text = path.read_text().lower()
        assert "cp311 only" not in text and "cp311-only" not in text, path
