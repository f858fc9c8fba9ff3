"""The base report (profile vs what the base declares) and the env floors, without an engine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sglx.cli import main
from sglx.image.build import _check_base
from sglx_core import base_probe
from sglx_core.base_facts import compare, labels, vendor_release
from sglx_core.base_probe import filter_lock
from sglx_core.errors import SglxError
from sglx_core.profile import load_profile
from sglx_runtime.preflight.base_check import check_base
from sglx_runtime.preflight.checks import Check
from sglx_runtime.preflight.env_floors import check_env_floors

# What upstream's ROCm 10 image declares (sglang docker/rocm.Dockerfile, stage rocm1000-base):
# the ROCm pip SDK, torch and Triton from AMD's wheel channel, all at ROCm 10.0.0.
UPSTREAM: dict[str, Any] = {
    "python": "3.12.3",
    "rocm": "10.0.0",
    "distributions": {
        "sglang": "0.5.23",
        "torch": "2.11.0+rocm10.0.0",
        "sglang-kernel": "0.4.10",
        "amd-aiter": "0.1.7",
        "triton": "3.8.0+git4cff872c.rocm10.0.0",
        "torchvision": "0.26.0+rocm10.0.0",
        "rocm-sdk-core": "10.0.0",
    },
}
RECORD = {"ref": "lmsysorg/sglang:v0.5.23-rocm10-mi30x", "digest": "sha256:" + "a" * 64}


def test_gfx942_names_the_upstream_base_and_what_it_provides() -> None:
    profile = load_profile("gfx942")
    assert profile.base.ref == "lmsysorg/sglang:v0.5.23-rocm10-mi30x"
    assert profile.sglang.wheel == "base"
    assert {"sglang", "sglang-kernel", "amd-aiter", "triton", "torch"} <= set(profile.base.provides)
    assert profile.base.rocm == ">=10.0,<10.1"
    assert profile.python.executable == "/opt/venv/bin/python3"
    assert profile.base.tag_pattern is None
    gfx1151 = load_profile("gfx1151")
    assert gfx1151.base.ref.startswith("rocm/sgl-dev:v0.5.23-rocm724-gfx1151")
    assert gfx1151.base.rocm == ">=7.2.4,<7.3"
    assert gfx1151.base.tag_pattern == "rocm/sgl-dev:v0.5.23-rocm724-gfx1151-YYYYMMDD"


@pytest.mark.parametrize(
    ("arch", "ref", "rocm"),
    [
        ("gfx942", "lmsysorg/sglang:v0.5.23-rocm10-mi30x", ">=10.0,<10.1"),
        ("gfx950", "lmsysorg/sglang:v0.5.23-rocm10-mi35x", ">=10.0,<10.1"),
        ("gfx1151", "rocm/sgl-dev:v0.5.23-rocm724-gfx1151", ">=7.2.4,<7.3"),
    ],
)
def test_arch_show_json_names_the_upstream_base_and_what_it_provides(
    arch: str, ref: str, rocm: str, capsys: pytest.CaptureFixture[str]
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
    assert base["rocm"] == rocm
    assert f"docker pull {ref}" in base["obtain"]
    assert "docker save" in base["obtain"]
    assert "sglx base load" in base["obtain"]
    assert "Traceback" not in out


def test_an_upstream_base_matches_its_profile() -> None:
    facts = compare(load_profile("gfx942"), UPSTREAM)
    assert all(f.matches in (True, None) for f in facts), facts
    assert labels(facts)["io.sglx.base.matches"] == "true"
    assert labels(facts)["io.sglx.base.rocm"] == "10.0.0"


def test_preflight_reports_the_base_with_its_digest() -> None:
    checks: list[Check] = []
    check_base(load_profile("gfx942"), checks, probe=UPSTREAM, report=RECORD)
    [base] = checks
    assert base.status == "pass"
    assert "lmsysorg/sglang:v0.5.23-rocm10-mi30x (sha256:aaaa" in base.detail
    assert "sglang 0.5.23" in base.detail and "rocm 10.0.0" in base.detail


def test_preflight_fails_a_base_whose_versions_differ() -> None:
    probe: dict[str, Any] = {
        **UPSTREAM,
        "rocm": "7.2.4",
        "distributions": {**UPSTREAM["distributions"], "sglang": "0.5.22"},
    }
    checks: list[Check] = []
    check_base(load_profile("gfx942"), checks, probe=probe, report=RECORD)
    [base] = checks
    assert base.status == "fail"
    assert base.failure is not None and base.failure.value == "config_refused"
    assert "sglang is 0.5.22, the profile expects 0.5.23" in base.detail
    assert "rocm is 7.2.4, the profile expects >=10.0,<10.1" in base.detail
    assert base.fix is not None and "sglx base load" in base.fix


def test_preflight_warns_about_provided_packages_the_base_lacks() -> None:
    probe = {**UPSTREAM, "distributions": {"sglang": "0.5.23", "torch": "2.11.0"}}
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
        ({"SGLANG_ROCM_USE_MULTI_STREAM": "1"}, "fail"),
        ({"SGLANG_ROCM_USE_MULTI_STREAM": "1", "GPU_MAX_HW_QUEUES": "2"}, "fail"),
        # sglang reads the switch as a boolean (EnvBool in srt/environ.py): any of its words
        ({"SGLANG_ROCM_USE_MULTI_STREAM": "true", "GPU_MAX_HW_QUEUES": "2"}, "fail"),
        ({"SGLANG_ROCM_USE_MULTI_STREAM": "Yes", "GPU_MAX_HW_QUEUES": "2"}, "fail"),
        ({"SGLANG_ROCM_USE_MULTI_STREAM": "1", "GPU_MAX_HW_QUEUES": "5"}, "pass"),
        ({"SGLANG_ROCM_USE_MULTI_STREAM": "false", "GPU_MAX_HW_QUEUES": "2"}, None),
        ({"SGLANG_ROCM_USE_MULTI_STREAM": "0", "GPU_MAX_HW_QUEUES": "2"}, None),
        ({"GPU_MAX_HW_QUEUES": "2"}, None),
    ],
)
def test_multi_stream_needs_five_hardware_queues(environ: dict[str, str], status: str) -> None:
    """Issue 40 item 3: a switched-on feature's floor is enforced (the profile sets no
    action, and the default refuses), however the switch is spelled."""
    checks: list[Check] = []
    check_env_floors(load_profile("gfx942"), checks, environ)
    if status is None:
        assert checks == []
        return
    [check] = checks
    assert (check.name, check.status) == ("env GPU_MAX_HW_QUEUES", status)
    if status == "fail":
        assert "serializes with fewer than 5 HIP hardware queues" in check.detail
        assert (
            check.fix
            == "set GPU_MAX_HW_QUEUES=5 for this server, or unset SGLANG_ROCM_USE_MULTI_STREAM"
        )


def test_no_lock_or_profile_claims_sglang_is_cp311_only(repo: Any) -> None:
    for path in [*repo.glob("images/**/*.yaml"), *repo.glob("bundles/locks/*.txt")]:
        text = path.read_text().lower()
        assert "cp311 only" not in text and "cp311-only" not in text, path


def _rocm_files(monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
    """Point the probe's version files at `root` standing in for the image's /."""
    monkeypatch.setattr(
        base_probe,
        "ROCM_VERSION_FILES",
        (root / "opt/rocm/.info/version", root / "opt/rocm/core/.info/version"),
    )


def test_rocm_is_read_through_the_opt_rocm_link_of_the_pip_sdk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Upstream's ROCm 10 images link /opt/rocm to the SDK's tree in site-packages."""
    devel = tmp_path / "opt/venv/lib/python3.12/site-packages/_rocm_sdk_devel"
    (devel / ".info").mkdir(parents=True)
    (devel / ".info/version").write_text("10.0.0\n")
    (tmp_path / "opt/rocm").symlink_to(devel)
    _rocm_files(monkeypatch, tmp_path)
    assert base_probe.rocm_version({"rocm-sdk-core": "10.0.1"}) == "10.0.0"


@pytest.mark.parametrize(
    ("files", "dists", "found"),
    [
        # apt-installed ROCm 7.x declares itself at the root of /opt/rocm
        ({"opt/rocm/.info/version": "7.2.4-1\n"}, {}, "7.2.4-1"),
        # TheRock's native packages keep it under core/
        ({"opt/rocm/core/.info/version": "10.0.0\n"}, {}, "10.0.0"),
        # no version file: the pip SDK's core distribution is the ROCm release
        ({}, {"rocm-sdk-core": "10.0.0", "torch": "2.11.0+rocm10.0.0"}, "10.0.0"),
        ({"opt/rocm/.info/version": "\n"}, {"torch": "2.13.0+cpu"}, None),
    ],
)
def test_rocm_release_comes_from_the_first_source_that_declares_one(
    files: dict[str, str],
    dists: dict[str, str],
    found: str | None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    _rocm_files(monkeypatch, tmp_path)
    assert base_probe.rocm_version(dists) == found


def _python(venv: Path) -> str:
    return str(venv / "bin" / "python")


def test_the_sglx_venv_sees_a_venv_base_and_its_editable_installs(tmp_path: Path) -> None:
    """Upstream's ROCm 10 images serve from /opt/venv (sglang, AITER installed editable, by a
    .pth file). A venv made by that venv's interpreter with --system-site-packages would see
    the system Python's packages only; `base_probe.py link` adds the base venv's."""
    base, sglx = tmp_path / "base", tmp_path / "sglx"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(base)], check=True)
    site_dir = Path(
        subprocess.run(
            [_python(base), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    dist = site_dir / "fixture_base-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fixture-base\nVersion: 1.0\n")
    source = tmp_path / "src"  # an editable install: the code lives outside site-packages
    (source / "fixture_base").mkdir(parents=True)
    (source / "fixture_base" / "__init__.py").write_text("WHERE = 'editable'\n")
    (site_dir / "__editable__.fixture_base-1.0.pth").write_text(f"{source}\n")
    probe = str(Path(base_probe.__file__))
    subprocess.run(
        [_python(base), "-m", "venv", "--without-pip", "--system-site-packages", str(sglx)],
        check=True,
    )
    done = subprocess.run(
        [_python(base), probe, "link", str(sglx)], check=True, capture_output=True, text=True
    )
    assert base_probe.LINK_NAME in done.stdout
    check = (
        "import fixture_base, importlib.metadata as m; "
        "print(fixture_base.WHERE, m.version('fixture-base'))"
    )
    out = subprocess.run(
        [_python(sglx), "-c", check], check=True, capture_output=True, text=True
    ).stdout
    assert out.split() == ["editable", "1.0"]


def test_link_leaves_a_system_interpreter_alone(tmp_path: Path) -> None:
    """--system-site-packages already shows a system Python's packages to the venv."""
    venv = tmp_path / "venv"
    system = str(Path(sys.base_prefix) / "bin" / "python{}.{}".format(*sys.version_info[:2]))
    subprocess.run([system, "-m", "venv", "--without-pip", str(venv)], check=True)
    probe = str(Path(base_probe.__file__))
    done = subprocess.run(
        [system, probe, "link", str(venv)],
        check=True,
        capture_output=True,
        text=True,
    )
    assert done.stdout == ""
    assert not list(venv.glob(f"lib/python*/site-packages/{base_probe.LINK_NAME}"))


@pytest.mark.parametrize(
    ("arch", "probe", "code", "named"),
    [
        # a ROCm 7.2 base under the ROCm 10 profile: both releases named
        (
            "gfx942",
            {**UPSTREAM, "rocm": "7.2.4-1"},
            "base_rocm_mismatch",
            ["has ROCm 7.2.4-1", "is for ROCm >=10.0,<10.1"],
        ),
        (
            "gfx950",
            {**UPSTREAM, "rocm": None},
            "base_rocm_mismatch",
            ["has no ROCm release it declares", "is for ROCm >=10.0,<10.1"],
        ),
        (
            "gfx942",
            {**UPSTREAM, "python": "3.10.12"},
            "base_python_mismatch",
            ["has Python 3.10.12", "are for Python 3.12"],
        ),
        (
            "gfx942",
            {**UPSTREAM, "distributions": {**UPSTREAM["distributions"], "sglang": "0.5.20"}},
            "base_sglang_mismatch",
            ["ships sglang 0.5.20", "supports sglang 0.5.23"],
        ),
    ],
)
def test_the_build_refuses_a_base_that_differs_naming_both_values(
    arch: str, probe: dict[str, Any], code: str, named: list[str]
) -> None:
    with pytest.raises(SglxError) as refused:
        _check_base(load_profile(arch), "fixture:base", probe)
    assert refused.value.code == code
    for text in named:
        assert text in refused.value.message


def test_the_gfx1151_refusal_names_the_dated_tags_to_look_for() -> None:
    """Upstream has only dated gfx1151 builds; the refusal says which tags to look for."""
    probe = {
        **UPSTREAM,
        "rocm": "7.2.4",
        "distributions": {**UPSTREAM["distributions"], "sglang": "0.5.20"},
    }
    with pytest.raises(SglxError) as refused:
        _check_base(load_profile("gfx1151"), "rocm/sgl-dev:v0.5.23-rocm724-gfx1151", probe)
    assert refused.value.code == "base_sglang_mismatch"
    assert "look for rocm/sgl-dev:v0.5.23-rocm724-gfx1151-YYYYMMDD" in (refused.value.hint or "")
    with pytest.raises(SglxError) as other:
        _check_base(load_profile("gfx942"), "x", {**probe, "rocm": "10.0.0"})
    assert "look for" not in (other.value.hint or "")


def test_the_vendor_platform_release_is_compared_with_the_sglang_its_vendor_runs() -> None:
    """Seed 000 (S0-40): the Kunlun base's sglang-kunlun against the sglang release its own CI
    runs it with (0.1.0 with 0.5.17). A pair its vendor never ran is served with a warning, at
    build and in preflight, never refused; one it ran passes; a base without it is named."""
    profile = load_profile("kunlun")
    kunlun_base: dict[str, Any] = {
        "python": "3.11.9",
        "distributions": {"sglang": "0.5.23", "torch": "2.9.0", "sglang-kunlun": "0.1.0"},
    }
    release = vendor_release(profile, kunlun_base)
    assert release is not None and not release.validated
    assert release.message() == (
        "sglang-kunlun 0.1.0 is run by its vendor with sglang 0.5.17; this image serves sglang "
        "0.5.23: expect hook drift and test it before it serves"
    )
    checks: list[Check] = []
    check_base(profile, checks, probe=kunlun_base, report=RECORD)
    (vendor,) = [c for c in checks if c.name == "vendor release"]
    assert vendor.status == "warn" and "0.5.17" in vendor.detail
    ran = profile.model_copy(
        update={"platform": profile.platform.model_copy(update={"vendor": profile.platform.vendor
                .model_copy(update={"sglang_validated": {"0.1.0": "0.5.23"}})})}  # type: ignore[union-attr]
    )  # fmt: skip
    validated = vendor_release(ran, kunlun_base)
    assert validated is not None and validated.validated
    lacking = vendor_release(profile, {"distributions": {"sglang": "0.5.23"}})
    assert lacking is not None and lacking.message() == "the base carries no sglang-kunlun"
    assert vendor_release(load_profile("gfx942"), UPSTREAM) is None
