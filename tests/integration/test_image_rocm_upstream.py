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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.dockerfile_env import dockerfile_env
from helpers.engine_fixtures import remove_images
from helpers.rocm_base import SITE_PACKAGES, rocm_layout
from helpers.vendor_images import (
    UPSTREAM_ARCHES,
    build_upstream_images,
    release,
    scan_upstream_images,
)

from sglx.cli import main

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ARCHES = UPSTREAM_ARCHES


def cli(*argv: str) -> tuple[int, dict[str, Any]]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([*argv, "--json", "-q"])
    return code, json.loads(out.getvalue())


@pytest.fixture(scope="module")
def upstream_set(
    docker: Any, run_id: str, tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[dict[str, Any]]:
    """The stand-ins, the project copy naming them and the images built on them
    (helpers/vendor_images.py; a run alone has built them beside the e2e); removed after the
    module. Not carried through `docker save` and `sglx base load`: test_image_fixtures does
    that with its bases, and the round trip of this multi-GB one cost minutes of CI and tested
    nothing more."""
    made = build_upstream_images(pytestconfig, tmp_path_factory, run_id)
    yield made
    release(made)


@pytest.fixture(scope="module")
def upstream_base(upstream_set: dict[str, Any]) -> dict[str, str]:
    """fixture-sglang-rocm: the ROCm 10 SDK layout for the mi30x/mi35x ref (`mi3x`), the apt
    ROCm 7.2.4 layout for gfx1151's."""
    bases: dict[str, str] = upstream_set["bases"]
    return bases


@pytest.fixture(scope="module")
def project(upstream_set: dict[str, Any]) -> Iterator[Path]:
    """The copy of images/ whose ROCm profiles name the stand-ins, for the in-process CLI of
    this module's tests."""
    root = Path(upstream_set["root"])
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SGLX_IMAGES_DIR", str(root / "images"))
        patch.setenv("SGLX_WHEELHOUSE", str(root / "wheelhouse"))
        yield root


@pytest.fixture(scope="module")
def built(upstream_set: dict[str, Any]) -> dict[str, dict[str, Any]]:
    images: dict[str, dict[str, Any]] = upstream_set["built"]
    return images


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


# Runs in the image: the baked cache's tree, then the build's compile again on a copy of it.
_CACHE_CHECK = """
import json, os, pathlib, shutil, subprocess, sys
root = pathlib.Path("/opt/sglx/triton-cache")
manifest = json.loads((root / "manifest.json").read_text())
entries = {}
for name in manifest["entries"]:
    folder = root / "triton" / name
    entries[name] = {
        "mode": oct(folder.stat().st_mode & 0o777), "owner": folder.stat().st_uid,
        "assembly": [p.read_text().count(sys.argv[1]) for p in folder.glob("*.amdgcn")],
    }
copy = pathlib.Path("/tmp/again")
shutil.copytree(root / "triton", copy)
subprocess.run([sys.executable, "-m", "sglx_kernels.warm", "--target", sys.argv[2], "--spec",
                str(root / "spec.json")], env={**os.environ, "TRITON_CACHE_DIR": str(copy)},
               check=True, capture_output=True)
print(json.dumps({"manifest": manifest, "entries": entries,
                  "after": sorted(p.name for p in copy.iterdir())}))
"""
TARGETS = {"gfx942": "hip:gfx942:64", "gfx950": "hip:gfx950:64", "gfx1151": "hip:gfx1151:32"}


@pytest.mark.parametrize("arch", ARCHES)
def test_the_image_carries_a_triton_cache_compiled_for_its_target(
    arch: str, docker: Any, built: dict[str, dict[str, Any]]
) -> None:
    """Compiled at build with the base's Triton (PyPI's 3.8.0 here) for the profile's gfx target
    and wave size, keyed in a label, root-owned and read-only; a second compile of the same
    spec in the image finds every kernel under the key it computes (nothing new)."""
    target, gfx = TARGETS[arch], arch
    label = built[arch]["labels"]["io.sglx.triton-cache"]
    assert label.startswith(f"{target} triton=3.8.0 kernels=")
    assert docker.images.get(built[arch]["tag"]).labels["io.sglx.triton-cache"] == label
    code, out = run_container(
        docker, built[arch]["tag"], ["-c", _CACHE_CHECK, f"amdgcn-amd-amdhsa--{gfx}", target],
        entrypoint="/opt/sglx/venv/bin/python",
    )  # fmt: skip
    assert code == 0, out
    found = json.loads(out)
    (key,) = found["manifest"]["keys"]
    assert f"{key['backend']}:{key['arch']}:{key['warp_size']}" == target
    assert len(found["entries"]) >= 10
    for entry in found["entries"].values():
        assert entry["mode"] == "0o555" and entry["owner"] == 0
        assert entry["assembly"] and all(n >= 1 for n in entry["assembly"])
    assert found["after"] == sorted(found["entries"])


@pytest.fixture(scope="module")
def scans(
    upstream_set: dict[str, Any],
    pytestconfig: pytest.Config,
    tmp_path_factory: pytest.TempPathFactory,
    run_id: str,
) -> dict[str, Any]:
    """`sglx scan --image` of each image with its arch's rules, as a child process with the
    project copy's profiles (a run alone made them beside the e2e: helpers/vendor_images.py)."""
    return scan_upstream_images(pytestconfig, tmp_path_factory, run_id)  # fmt: skip


@pytest.mark.parametrize("arch", ARCHES)
def test_scan_passes_with_the_arch_rules(
    arch: str, scans: dict[str, Any], built: dict[str, dict[str, Any]]
) -> None:
    envelope = scans[arch]
    assert envelope["data"]["source"]["ref"] == built[arch]["tag"]
    assert envelope["exit_code"] == 0, [f["message"] for f in envelope["findings"]][:10]


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
    # No device to compare the prebuilt Triton cache's key with: it is left out, and said.
    assert "sglx-serve: prebuilt Triton cache not used: the devices could not be read" in out
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
