"""gfx942, gfx950 and gfx1151 build on stand-ins for upstream's SGLang ROCm images, offline.

Upstream's released images (lmsysorg/sglang:v0.5.23-rocm10-mi30x/-mi35x,
rocm/sgl-dev:v0.5.23-rocm724-gfx1151-<date>) cannot be fetched here, so fixture bases stand in
for them: the session's debootstrapped Debian with a venv at /opt/venv whose site-packages hold
sglang 0.5.23 from PyPI (installed with `pip install --target`, as upstream's ROCm 10 images keep
everything in /opt/venv), and on top of that one of the two ROCm layouts of helpers/rocm_base.py:
the ROCm 10 pip SDK (/opt/rocm a link into site-packages, LD_LIBRARY_PATH, the release in
rocm-sdk-core's metadata) for the mi30x/mi35x ref, an apt-installed ROCm 7.2.4 for gfx1151's.
What differs, and the test's copy of the profiles says so: Debian's Python is 3.11 where
upstream's is 3.12, gfx1151's copy uses the same /opt/venv Python, torch is a CPU build
(2.13.0+cpu, the newest CPU build the configured index has) where upstream's is a ROCm build,
AITER, sgl-kernel and torchvision are metadata-only stand-ins (no index here has a build of them
for ROCm; PyPI's torchvision is a CUDA build that needs libtorch_cuda.so and does not import
beside a CPU torch), and Triton is PyPI's wheel, whose test plugins the copy of the profile
accepts as the cpu profile does. The locks are resolved from the cpu wheelhouse the stand-in
was installed from (pip's --find-links, no index), so they pin the versions the base has.
Everything else -- profile, lock, template, build, scan, preflight -- is the real logic, and
nothing reaches a network but the download of the CPU torch.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.dockerfile_env import dockerfile_env
from helpers.engine_fixtures import remove_images
from helpers.images_copy import copy_images, edit_yaml, lock_from_wheelhouse
from helpers.rocm_base import SITE_PACKAGES, VENV, Layout, rocm_layout

from sglx.cli import main

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ARCHES = ["gfx942", "gfx950", "gfx1151"]
CPU_TORCH = ["torch==2.13.0+cpu"]
# Wheels of the cpu lock the stand-in leaves out: the CUDA runtime PyPI's torch pulls in, that
# torch itself (replaced by the CPU build above), and PyPI's torchvision, a CUDA build that needs
# libtorch_cuda.so and libcudart and cannot even import beside a CPU torch ("operator
# torchvision::nms does not exist"); no CPU torchvision for torch 2.13 is on the configured index.
LEFT_OUT = ("nvidia_", "cuda_", "torch-", "torchvision-")
# Declared by pip metadata only: what the upstream image builds for the target and no index here
# has (sgl-kernel and AITER for gfx9xx, torchvision for ROCm torch). sglang imports none of them
# at startup: sgl-kernel and AITER on ROCm are imported by the kernels that use them, and
# transformers looks for torchvision's module, which a metadata-only stand-in does not have.
STAND_INS = {"sglang-kernel": "0.4.10", "amd-aiter": "0.1.7", "torchvision": "0.28.0"}
# PyPI's Triton wheel (the stand-in's Triton: sglang imports it at startup) carries test MLIR
# plugins whose RUNPATH points at Triton's build tree; libtriton loads them only from
# TRITON_PLUGIN_PATHS. The cpu profile accepts them with the same reason; the test's copy of the
# ROCm profile does too, for the base's site-packages.
TRITON_PLUGINS = {
    f"{SITE_PACKAGES}/triton/plugins/*": (
        "Triton's example and test MLIR plugins (RUNPATH into Triton's build tree); libtriton "
        "loads them only from TRITON_PLUGIN_PATHS"
    )
}


def cli(*argv: str) -> tuple[int, dict[str, Any]]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([*argv, "--json", "-q"])
    return code, json.loads(out.getvalue())


def ok(*argv: str) -> dict[str, Any]:
    code, envelope = cli(*argv)
    assert code == 0, envelope["errors"]
    return envelope


@pytest.fixture(scope="module")
def cpu_torch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The CPU torch the stand-in serves with, fetched the way the wheelhouses are."""
    folder = tmp_path_factory.mktemp("cpu-torch")
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
         "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64", "-q",
         "-d", str(folder), *CPU_TORCH],
        check=True,
    )  # fmt: skip
    return folder


def _install_site_packages(
    docker: Any, base: str, wheelhouse: Path, cpu_torch: Path, tag: str
) -> None:
    """A venv at /opt/venv with sglang and its serving set in its site-packages, offline,
    committed."""
    wheels = [f"/w/{p.name}" for p in sorted(wheelhouse.glob("*.whl"))]
    wheels = [w for w in wheels if not w.removeprefix("/w/").startswith(LEFT_OUT)]
    wheels += [f"/t/{p.name}" for p in sorted(cpu_torch.glob("*.whl"))]
    script = (
        f"python3 -m venv --without-pip {VENV} "
        "&& python3 -m venv /tmp/pip && /tmp/pip/bin/pip install -q --no-index --no-deps "
        f"--no-compile --disable-pip-version-check --target {SITE_PACKAGES} --upgrade "
        + " ".join(wheels)
        + " && rm -rf /tmp/pip"
    )
    container = docker.containers.run(
        base,
        ["sh", "-c", script],
        detach=True,
        network_mode="none",
        volumes={str(wheelhouse): {"bind": "/w", "mode": "ro"}, str(cpu_torch): {"bind": "/t"}},
    )
    try:
        code = container.wait(timeout=1800)["StatusCode"]
        assert code == 0, container.logs().decode()[-3000:]
        repository, _, version = tag.partition(":")
        container.commit(repository=repository, tag=version)
    finally:
        container.remove(force=True)


@pytest.fixture(scope="module")
def upstream_base(
    docker: Any,
    cpu_base: str,
    cpu_wheelhouse: Path,
    cpu_torch: Path,
    run_id: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, str]]:
    """fixture-sglang-rocm: the venv with sglang installed once, then the ROCm 10 SDK layout
    on it for the mi30x/mi35x ref and the apt ROCm 7.2.4 layout for gfx1151's. Not carried
    through `docker save` and `sglx base load`: test_image_fixtures does that with its bases,
    and the round trip of this multi-GB one cost minutes of CI and tested nothing more."""
    work = tmp_path_factory.mktemp("fixture-sglang-rocm")
    site = f"sglx-test/fixture-sglang-rocm-site:{run_id}"
    tags = {
        "mi3x": f"sglx-test/fixture-sglang-rocm:{run_id}",
        "gfx1151": f"sglx-test/fixture-sglang-rocm-gfx1151:{run_id}",
    }
    layouts: dict[str, tuple[Layout, str]] = {
        "mi3x": ("sdk", "10.0.0"),
        "gfx1151": ("apt", "7.2.4-1"),
    }
    try:
        _install_site_packages(docker, cpu_base, cpu_wheelhouse, cpu_torch, site)
        for name, (layout, version) in layouts.items():
            context = rocm_layout(
                work / name, layout=layout, rocm_version=version, metadata_only=STAND_INS
            )
            docker.images.build(
                path=str(context),
                tag=tags[name],
                buildargs={"BASE": site},
                network_mode="none",
                rm=True,  # docker-py keeps each step's container otherwise
            )
        yield tags
    finally:
        remove_images(docker, *tags.values(), site)


@pytest.fixture(scope="module")
def project(
    tmp_path_factory: pytest.TempPathFactory, upstream_base: dict[str, str], cpu_wheelhouse: Path
) -> Iterator[Path]:
    """A copy of images/ whose ROCm profiles name the stand-in (see the module doc), locked
    from the cpu wheelhouse the stand-in was installed from (helpers/images_copy.py)."""
    root = tmp_path_factory.mktemp("rocm-upstream-project")
    images = copy_images(root)
    edit_yaml(
        images / "shared" / "rocm.yaml",
        {"python": {"glibc": "2.36"}, "scan": {"optional_files": TRITON_PLUGINS}},
    )
    stand_in = {"version": "3.11", "torch": "==2.13.0"}
    edit_yaml(images / "shared" / "cdna.yaml", {"python": stand_in})
    for arch in ("gfx942", "gfx950"):
        edit_yaml(images / arch / "arch.yaml", {"base": {"ref": upstream_base["mi3x"]}})
    edit_yaml(
        images / "gfx1151" / "arch.yaml",
        {
            "python": {**stand_in, "executable": f"{VENV}/bin/python3"},
            "base": {"ref": upstream_base["gfx1151"]},
        },
    )
    patch = pytest.MonkeyPatch()
    patch.setenv("SGLX_IMAGES_DIR", str(images))
    patch.setenv("SGLX_WHEELHOUSE", str(root / "wheelhouse"))
    ok("image", "render")
    lock_from_wheelhouse(images, ARCHES, cpu_wheelhouse, ok)
    yield root
    patch.undo()


@pytest.fixture(scope="module")
def built(docker: Any, project: Path, run_id: str) -> Iterator[dict[str, dict[str, Any]]]:
    images: dict[str, dict[str, Any]] = {}
    try:
        for arch in ARCHES:
            images[arch] = ok(
                "image", "build", "--arch", arch, "--tag", f"sglx-test/{arch}-upstream:{run_id}",
                "--wheelhouse", str(project / "wheelhouse" / "shared"),
            )["data"]  # fmt: skip
        yield images
    finally:
        payloads = [p for data in images.values() for p in data["payload_images_imported"]]
        remove_images(docker, *(d["tag"] for d in images.values()), *payloads)


def run_container(docker: Any, image: str, argv: list[str], **kwargs: Any) -> tuple[int, str]:
    container = docker.containers.run(image, argv, detach=True, network_mode="none", **kwargs)
    try:
        code = container.wait(timeout=600)["StatusCode"]
        return code, container.logs().decode()
    finally:
        container.remove(force=True)


@pytest.mark.parametrize("arch", ARCHES)
def test_labels_report_the_base_and_its_versions(
    arch: str, built: dict[str, dict[str, Any]], upstream_base: dict[str, str]
) -> None:
    labels = built[arch]["labels"]
    assert (
        labels["org.opencontainers.image.base.name"]
        == upstream_base["gfx1151" if arch == "gfx1151" else "mi3x"]
    )
    assert labels["org.opencontainers.image.base.digest"].startswith("sha256:")
    assert labels["io.sglx.base.sglang"] == "0.5.23"
    assert labels["io.sglx.base.torch"] == "2.13.0+cpu"
    # ROCm 10 declared by the pip SDK's metadata; ROCm 7.2.4 by /opt/rocm/.info/version
    assert labels["io.sglx.base.rocm"] == ("7.2.4-1" if arch == "gfx1151" else "10.0.0")
    assert labels["io.sglx.base.matches"] == "true"


@pytest.mark.parametrize("arch", ARCHES)
def test_build_installs_only_what_sglx_adds(
    arch: str, docker: Any, built: dict[str, dict[str, Any]]
) -> None:
    code, out = run_container(
        docker, built[arch]["tag"], ["/opt/sglx/venv/sglx-base-build.json"], entrypoint="cat"
    )
    assert code == 0, out
    record = json.loads(out)
    assert record["installed"] == []  # the base has every locked wheel
    assert any(line.startswith("transformers ") for line in record["kept"])
    code, out = run_container(
        docker,
        built[arch]["tag"],
        # find_spec, not import: importing sglang resolves the platform, which needs the device
        ["-c", "import importlib.util as u, importlib.metadata as m; "
         "print(u.find_spec('sglang').origin, m.version('sglx-platform'))"],
        entrypoint="/opt/sglx/venv/bin/python",
    )  # fmt: skip
    assert code == 0, out
    assert out.split() == [f"{SITE_PACKAGES}/sglang/__init__.py", "0.1.0"]


@pytest.mark.parametrize("arch", ARCHES)
def test_image_carries_the_profile_environment(
    arch: str, docker: Any, built: dict[str, dict[str, Any]], project: Path
) -> None:
    config = dict(
        item.partition("=")[::2]
        for item in docker.images.get(built[arch]["tag"]).attrs["Config"]["Env"]
    )
    expected = dockerfile_env(project / "images" / arch / "Dockerfile")
    expected.pop("PATH")
    assert {k: config.get(k) for k in expected} == expected
    assert config["RAY_EXPERIMENTAL_NOSET_ROCR_VISIBLE_DEVICES"] == "1"


@pytest.mark.parametrize("arch", ARCHES)
def test_scan_passes_with_the_arch_rules(
    arch: str, built: dict[str, dict[str, Any]], project: Path
) -> None:
    code, envelope = cli("scan", "--image", built[arch]["tag"], "--arch", arch)
    assert code == 0, [f["message"] for f in envelope.get("findings", [])][:10]


@pytest.mark.parametrize("arch", ARCHES)
def test_preflight_fails_only_on_the_missing_devices(
    arch: str, docker: Any, built: dict[str, dict[str, Any]]
) -> None:
    code, out = run_container(
        docker, built[arch]["tag"], ["--json"], entrypoint="/opt/sglx/venv/bin/sglx-preflight"
    )
    assert code == 1, out
    checks = {c["check"]: c for c in json.loads(out)["data"]["checks"]}
    failing = {name: c["class"] for name, c in checks.items() if c["status"] == "fail"}
    assert failing and set(failing.values()) == {"device_init_failed"}, failing
    assert checks["base"]["status"] == "pass"
    assert "sglang 0.5.23" in checks["base"]["detail"]
    assert "Traceback" not in out


@pytest.mark.parametrize("arch", ARCHES)
def test_sglx_serve_hands_the_environment_to_preflight_and_stops(
    arch: str, docker: Any, built: dict[str, dict[str, Any]]
) -> None:
    """The server starts beside preflight and stops on the missing device by itself: with
    SGLANG_PLATFORM=sglx, sglang logs and re-raises the plugin's classified PlatformError (its
    own traceback, twice: logger.exception, then the uncaught exit). Preflight's report and
    sglx-serve's verdict follow; no other traceback appears."""
    code, out = run_container(docker, built[arch]["tag"], [])
    assert code == 1
    assert "[device_init_failed] device /dev/kfd: not visible" in out
    # The container log interleaves stdout and stderr by arrival, so the verdict's position
    # among preflight's own lines is not fixed; that it is there, with exit 1, is.
    assert "sglx-serve: preflight failed (exit 1); stopping the server" in out
    classified = out.count("PlatformError: [sglx device_init_failed] SGLANG_PLATFORM=sglx")
    assert out.count("Traceback") == classified, out[-4000:]


def test_a_base_with_another_sglang_is_refused(
    docker: Any, cpu_base: str, project: Path, run_id: str, tmp_path: Path
) -> None:
    tag = f"sglx-test/fixture-sglang-0522:{run_id}"
    context = rocm_layout(
        tmp_path / "other", layout="sdk", rocm_version="10.0.0", metadata_only={"sglang": "0.5.22"}
    )
    docker.images.build(
        path=str(context), tag=tag, buildargs={"BASE": cpu_base}, network_mode="none", rm=True
    )
    try:
        code, envelope = cli(
            "image", "build", "--arch", "gfx942", "--base", tag,
            "--wheelhouse", str(project / "wheelhouse" / "shared"),
        )  # fmt: skip
    finally:
        remove_images(docker, tag)
    assert code == 2
    [error] = envelope["errors"]
    assert error["code"] == "base_sglang_mismatch"
    assert "ships sglang 0.5.22" in error["message"]
    assert "supports sglang 0.5.23" in error["message"]
    assert "Traceback" not in json.dumps(envelope)


def test_a_rocm_7_base_is_refused_by_the_rocm_10_profile(
    project: Path, upstream_base: dict[str, str]
) -> None:
    """gfx1151's stand-in has the right Python and sglang but ROCm 7.2.4: gfx942 is for 10."""
    code, envelope = cli(
        "image", "build", "--arch", "gfx942", "--base", upstream_base["gfx1151"],
        "--wheelhouse", str(project / "wheelhouse" / "shared"),
    )  # fmt: skip
    assert code == 2
    [error] = envelope["errors"]
    assert error["code"] == "base_rocm_mismatch"
    assert "has ROCm 7.2.4-1" in error["message"]
    assert "profile is for ROCm >=10.0,<10.1" in error["message"]
    assert "Traceback" not in json.dumps(envelope)


def test_a_missing_gfx1151_base_names_the_dated_tags_to_look_for(
    project: Path, run_id: str
) -> None:
    """Upstream publishes only dated gfx1151 builds: the refusal says which tags to look for."""
    code, envelope = cli(
        "image", "build", "--arch", "gfx1151", "--base", f"sglx-test/absent:{run_id}",
        "--wheelhouse", str(project / "wheelhouse" / "shared"),
    )  # fmt: skip
    assert code == 2
    [error] = envelope["errors"]
    assert error["code"] == "base_missing"
    assert "look for rocm/sgl-dev:v0.5.23-rocm724-gfx1151-YYYYMMDD" in error["hint"]
