"""The vendor images of the suite: fixture bases standing in for the vendors' and the sglx
images built on them, offline, once per run.

Two sets, each the subject of one test module (its docstring says what the stand-ins are and
how they differ from the real bases):

- `upstream_images` (test_image_rocm_upstream.py): stand-ins for upstream's SGLang ROCm images
  (sglang 0.5.23 and a CPU torch in /opt/venv, one of helpers/rocm_base.py's ROCm layouts on
  top), and the gfx942, gfx950 and gfx1151 images built on them.
- `fixture_images` (test_image_fixtures.py): fixture-rocm and fixture-kunlun bases (gcc-built
  vendor libraries on the session's Debian), carried through `docker save` and `sglx base
  load`, and the gfx942 (rocm/pytorch route) and kunlun images built on them.

Both take minutes of building that depend on nothing but the cpu base and wheelhouse. A run
alone builds them in the cpu chain's thread while the e2e module runs (worker_schedule.py),
so that the modules find them built. They are plain functions for that reason: every step
runs sglx as a child process with an environment of its own (the project copy's folders), and
never reads or patches os.environ, which the tests running meanwhile patch. Everything they
make is recorded (run_shared.once) and removed by the module when its tests are done, or by
the run's end.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from helpers.child_env import child_environment
from helpers.elf import shared_library
from helpers.engine_fixtures import (
    REPO,
    SGLX,
    build_cpu_base,
    fetch_cpu_wheelhouse,
    remove_images,
    sglx_json,
)
from helpers.images_copy import copy_images, edit_yaml, lock_from_wheelhouse
from helpers.kunlun_vendor import STAND_IN as KUNLUN_VENDOR
from helpers.rocm_base import ROCM_LIBS, SITE_PACKAGES, VENV, Layout, rocm_layout
from helpers.run_shared import Made, once
from sglx.engine import docker_client

# --- upstream's SGLang ROCm images (test_image_rocm_upstream.py) ---------------------------

UPSTREAM_ARCHES = ["gfx942", "gfx950", "gfx1151"]
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
UPSTREAM_LAYOUTS: dict[str, tuple[Layout, str]] = {
    "mi3x": ("sdk", "10.0.0"),
    "gfx1151": ("apt", "7.2.4-1"),
}

# --- fixture bases of the other routes (test_image_fixtures.py) ----------------------------

FIXTURE_ARCHES = ["gfx942", "kunlun"]
XRE_LIBS = ["libxpurt.so.2", "libxpucuda.so", "libxpuml.so.1"]


def project_runner(root: Path) -> Callable[..., dict[str, Any]]:
    """`sglx ARGV` as a child process against the project copy under `root` (its images and
    wheelhouse folders); its data, asserting success."""
    return functools.partial(
        sglx_json,
        SGLX_IMAGES_DIR=str(root / "images"),
        SGLX_WHEELHOUSE=str(root / "wheelhouse"),
    )


def build_upstream_images(
    config: pytest.Config, tmp_path_factory: pytest.TempPathFactory, run_id: str
) -> dict[str, Any]:
    """The stand-ins for upstream's images (`bases`: mi3x, gfx1151), the project copy whose
    ROCm profiles name them (`root`), and the image built for each arch on them (`built`:
    `sglx image build`'s data)."""

    def make() -> Made:
        base = build_cpu_base(config, run_id)
        wheelhouse = fetch_cpu_wheelhouse(config, tmp_path_factory)
        work = tmp_path_factory.mktemp("fixture-sglang-rocm")
        site = f"sglx-test/fixture-sglang-rocm-site:{run_id}"
        bases = {
            "mi3x": f"sglx-test/fixture-sglang-rocm:{run_id}",
            "gfx1151": f"sglx-test/fixture-sglang-rocm-gfx1151:{run_id}",
        }
        made = Made({}, images=[site, *bases.values()], paths=[str(work)])
        with _removed_on_failure(made):
            torch = _download(work / "cpu-torch", CPU_TORCH)
            _install_site_packages(base, wheelhouse, torch, site)
            for name, (layout, version) in UPSTREAM_LAYOUTS.items():
                context = rocm_layout(
                    work / name, layout=layout, rocm_version=version, metadata_only=STAND_INS
                )
                _build(context, bases[name], {"BASE": site})
            root = work / "project"
            run = project_runner(root)
            _upstream_project(root, bases, wheelhouse, run)
            built = {}
            for arch in UPSTREAM_ARCHES:
                tag = f"sglx-test/{arch}-upstream:{run_id}"
                made.images.append(tag)
                built[arch] = run("image", "build", "--arch", arch, "--tag", tag,
                                  "--wheelhouse", str(root / "wheelhouse" / "shared"))  # fmt: skip
                made.images += built[arch]["payload_images_imported"]
        made.value = {"bases": bases, "root": str(root), "built": built, "images": made.images}
        return made

    value: dict[str, Any] = once(config, "upstream_images", make)
    return value


def scan_upstream_images(
    config: pytest.Config, tmp_path_factory: pytest.TempPathFactory, run_id: str
) -> dict[str, Any]:
    """`sglx scan --image` of each upstream image with its arch's rules (the project copy's
    profiles), once per run: arch -> the whole envelope, findings and exit code included. A run
    alone scans them beside the e2e, after building them (worker_schedule.py), as it scans the
    cpu bundle: about a minute and a half the module's tests then do not wait for."""

    def make() -> Made:
        made = build_upstream_images(config, tmp_path_factory, run_id)
        root = Path(made["root"])
        scans = {}
        for arch in UPSTREAM_ARCHES:
            command = [SGLX, "scan", "--image", made["built"][arch]["tag"], "--arch", arch,
                       "--json", "-q"]  # fmt: skip
            done = subprocess.run(
                command, capture_output=True, text=True, check=False, cwd=REPO,
                env=child_environment(SGLX_IMAGES_DIR=str(root / "images"),
                                      SGLX_WHEELHOUSE=str(root / "wheelhouse")),
            )  # fmt: skip
            try:
                scans[arch] = json.loads(done.stdout)
            except json.JSONDecodeError:
                raise AssertionError(
                    f"{' '.join(command)}: exit {done.returncode}: {done.stderr[-3000:]}"
                ) from None
        return Made(scans)

    value: dict[str, Any] = once(config, "upstream_scans", make)
    return value


def _upstream_project(
    root: Path, bases: dict[str, str], wheelhouse: Path, run: Callable[..., Any]
) -> None:
    """A copy of images/ whose ROCm profiles name the stand-ins, locked from the cpu wheelhouse
    the stand-in was installed from (helpers/images_copy.py)."""
    images = copy_images(root)
    edit_yaml(
        images / "shared" / "rocm.yaml",
        {"python": {"glibc": "2.36"}, "scan": {"optional_files": TRITON_PLUGINS}},
    )
    stand_in = {"version": "3.11", "torch": "==2.13.0"}
    edit_yaml(images / "shared" / "cdna.yaml", {"python": stand_in})
    for arch in ("gfx942", "gfx950"):
        edit_yaml(images / arch / "arch.yaml", {"base": {"ref": bases["mi3x"]}})
    edit_yaml(
        images / "gfx1151" / "arch.yaml",
        {
            "python": {**stand_in, "executable": f"{VENV}/bin/python3"},
            "base": {"ref": bases["gfx1151"]},
        },
    )
    run("image", "render")
    lock_from_wheelhouse(images, UPSTREAM_ARCHES, wheelhouse, run)


def _download(folder: Path, requirements: list[str]) -> Path:
    """Wheels fetched the way the wheelhouses are (pip download, binary only, Python 3.11)."""
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
         "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64", "-q",
         "-d", str(folder), *requirements],
        check=True,
    )  # fmt: skip
    return folder


def _install_site_packages(base: str, wheelhouse: Path, cpu_torch: Path, tag: str) -> None:
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
    from docker.types import Mount

    # Mounts, not docker-py's `volumes=`, which also lists each target in the container's
    # Config.Volumes: the commit would keep them, and every container of an image built on
    # this base would get (and leave behind) two anonymous volumes.
    container = docker_client().containers.run(
        base,
        ["sh", "-c", script],
        detach=True,
        network_mode="none",
        mounts=[
            Mount("/w", str(wheelhouse), type="bind", read_only=True),
            Mount("/t", str(cpu_torch), type="bind"),
        ],
    )
    try:
        code = container.wait(timeout=1800)["StatusCode"]
        assert code == 0, container.logs().decode()[-3000:]
        repository, _, version = tag.partition(":")
        container.commit(repository=repository, tag=version)
    finally:
        container.remove(force=True)


def build_fixture_images(
    config: pytest.Config, tmp_path_factory: pytest.TempPathFactory, run_id: str
) -> dict[str, Any]:
    """fixture-rocm and fixture-kunlun bases loaded with `sglx base load` from saved tars
    (`bases`: rocm, kunlun), the project copy whose vendor profiles name them (`root`), and the
    gfx942 and kunlun images built on them (`arch_images`: arch -> tag)."""

    def make() -> Made:
        base = build_cpu_base(config, run_id)
        wheelhouse = fetch_cpu_wheelhouse(config, tmp_path_factory)
        work = tmp_path_factory.mktemp("fixture-bases")
        made = Made({}, paths=[str(work)])
        with _removed_on_failure(made):
            bases = {}
            for family in ("rocm", "kunlun"):
                bases[family] = f"sglx-test/fixture-{family}-base:{run_id}"
                made.images.append(bases[family])
                _load_fixture_base(work, family, base, bases[family], run_id)
            root = work / "project"
            run = project_runner(root)
            _fixture_project(root, bases, wheelhouse, run)
            images = {}
            for arch in FIXTURE_ARCHES:
                images[arch] = f"sglx-test/{arch}:{run_id}"
                made.images.append(images[arch])
                data = run("image", "build", "--arch", arch, "--tag", images[arch],
                           "--wheelhouse", str(root / "wheelhouse" / "shared"))  # fmt: skip
                made.images += data["payload_images_imported"]
        made.value = {"bases": bases, "root": str(root), "arch_images": images,
                      "images": made.images}  # fmt: skip
        return made

    value: dict[str, Any] = once(config, "fixture_images", make)
    return value


def _load_fixture_base(work: Path, family: str, base: str, tag: str, run_id: str) -> None:
    """Build the fixture base of `family`, save it to a tar with its .sha256 beside, and load
    it back as `tag` with `sglx base load`, as a site does with a vendor's base."""
    docker = docker_client()
    built = f"sglx-test/fixture-{family}-build:{run_id}"
    _build(fixture_context(work / family, family), built, {"BASE": base})
    archive = work / f"fixture-{family}-base.tar"
    with archive.open("wb") as handle:
        for chunk in docker.images.get(built).save(named=False):
            handle.write(chunk)
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    archive.with_name(archive.name + ".sha256").write_text(f"{digest}  {archive.name}\n")
    remove_images(docker, built)
    loaded = sglx_json("base", "load", str(archive), "--tag", tag)
    assert loaded["sha256"] == digest
    archive.unlink()


def _fixture_project(
    root: Path, bases: dict[str, str], wheelhouse: Path, run: Callable[..., Any]
) -> None:
    """A copy of images/ whose vendor profiles point at the fixture bases, locked from the
    run's cpu wheelhouse (the same Python and sglang; helpers/images_copy.py)."""
    images = copy_images(root)
    python = {"version": "3.11", "executable": "/usr/bin/python3", "glibc": "2.36"}
    edit_yaml(images / "shared" / "base.yaml", {"sglang": {"wheel": "pypi"}})
    edit_yaml(images / "shared" / "cdna.yaml", {"python": {"version": "3.11"}})
    edit_yaml(
        images / "shared" / "rocm-pytorch.yaml",
        {
            "sglang": {"wheel": "pypi"},
            "python": {**python, "torch": ">=2.10"},
            "base": {"ref": bases["rocm"], "rocm": None},
        },
    )
    # The fixture base has ROCm's libraries but no torch or Triton: nothing to compile a
    # prebuilt Triton cache with (the upstream stand-ins carry Triton and build one).
    edit_yaml(
        images / "gfx942" / "arch.yaml",
        {
            "extends": ["cdna", "rocm-pytorch"],
            "base": {"ref": bases["rocm"]},
            "kernels": {"prebuilt_cache": None},
        },
    )
    edit_yaml(images / "kunlun" / "arch.yaml", {"python": python, "base": {"ref": bases["kunlun"]}})
    run("image", "render")
    lock_from_wheelhouse(images, FIXTURE_ARCHES, wheelhouse, run)


def fixture_context(folder: Path, family: str) -> Path:
    """Build context of a fixture base: gcc-built stand-ins for the vendor user space."""
    libs = folder / "libs"
    files = folder / "files"
    if family == "rocm":
        for soname in ROCM_LIBS:
            shared_library(libs, soname, "int fixture_rocm(void) { return 0; }\n")
        (files / "ld").mkdir(parents=True)
        (files / "ld" / "rocm.conf").write_text("/opt/rocm/lib\n")
        layout = [
            "COPY libs/ /opt/rocm/lib/",
            "COPY files/ld/rocm.conf /etc/ld.so.conf.d/rocm.conf",
            "RUN ldconfig && mkdir -p /opt/rocm/bin /usr/share/libdrm "
            "/opt/rocm/lib/rocblas/library /opt/rocm/lib/hipblaslt/library "
            "&& printf '#!/bin/sh\\necho fixture rocminfo\\n' > /opt/rocm/bin/rocminfo "
            "&& chmod 755 /opt/rocm/bin/rocminfo "
            "&& echo '74A1, 00, fixture MI300X' > /usr/share/libdrm/amdgpu.ids "
            "&& for g in gfx942 gfx950 gfx1151; do "
            "touch /opt/rocm/lib/rocblas/library/TensileLibrary_$g.dat "
            "/opt/rocm/lib/hipblaslt/library/extop_$g.co; done",
        ]
    else:
        for soname in XRE_LIBS:
            shared_library(libs / "xre", soname, "int fixture_xre(void) { return 0; }\n")
        shared_library(libs / "xccl", "libbkcl.so", "int fixture_bkcl(void) { return 0; }\n")
        # sglang-kunlun, which the Kunlun base carries and sglx's platform subclasses: the
        # tests' stand-in, installed where the base's Python finds it.
        for part in ("sglang_kunlun", "sglang_kunlun-0.1.0.dist-info"):
            shutil.copytree(KUNLUN_VENDOR / part, files / "sglang-kunlun" / part)
        layout = [
            "COPY libs/xre/ /usr/local/xre/so/",
            "COPY libs/xccl/ /usr/local/xccl/so/",
            "COPY files/sglang-kunlun/ /usr/local/lib/python3.11/dist-packages/",
            "RUN ln -s libxpucuda.so /usr/local/xre/so/libcuda.so.1",
        ]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "Dockerfile").write_text("ARG BASE\nFROM ${BASE}\n" + "\n".join(layout) + "\n")
    return folder


def _build(context: Path, tag: str, buildargs: dict[str, str]) -> None:
    docker_client().images.build(
        path=str(context), tag=tag, buildargs=buildargs, network_mode="none", rm=True
    )


@contextlib.contextmanager
def _removed_on_failure(made: Made) -> Any:
    """A build that fails removes what it made so far (the run's end removes only what a
    build that succeeded recorded)."""
    try:
        yield
    except BaseException:
        remove_images(docker_client(), *made.images)
        for path in made.paths:
            shutil.rmtree(path, ignore_errors=True)
        raise


def release(made: dict[str, Any]) -> None:
    """Remove a set's images (`images`: every one it made) and folder once its module is done
    with them: the disk is shared with the rest of the run, whose end would do it otherwise."""
    remove_images(docker_client(), *made["images"])
    shutil.rmtree(Path(made["root"]).parent, ignore_errors=True)
