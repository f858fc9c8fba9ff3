"""The bases that do not ship sglang build offline: kunlun's site-built base, and ROCm's
alternative route (rocm/pytorch plus a site-built sglang wheel, images/shared/rocm-pytorch.yaml),
here for gfx942. The default ROCm route, upstream's SGLang images, is test_image_rocm_upstream.py.

The vendor bases (rocm/pytorch, a Kunlun XRE + xpytorch image) cannot be fetched here, so
fixture bases stand in for them: the session's debootstrapped Debian plus the vendor libraries
the profiles require, compiled here with gcc (named fixture-*), carried through `docker save`
and `sglx base load` as a site would. Debian has Python 3.11 where the vendor bases have 3.12,
so the test's copy of the profiles says 3.11 and lets the PyPI sglang wheel stand in for the
source build; everything else -- lock, wheelhouse, template, build, preflight -- is the real
logic. The fixture ROCm base has no torch or Triton, so the copy of gfx942's profile builds no
prebuilt Triton cache (test_image_rocm_upstream.py builds and checks one on a base with Triton).
Without devices, each container's preflight must report device_init_failed.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.engine_fixtures import remove_images
from helpers.vendor_images import FIXTURE_ARCHES, build_fixture_images, release

from sglx.cli import main
from sglx_core.profile import load_profile

pytestmark = [pytest.mark.docker, pytest.mark.slow]

VENDOR_ARCHES = FIXTURE_ARCHES


@pytest.fixture(scope="module")
def fixture_set(
    docker: Any, run_id: str, tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[dict[str, Any]]:
    """The fixture bases, loaded with `sglx base load` from saved tars, and the images built on
    them from the project copy naming them (helpers/vendor_images.py; a run alone has built
    them beside the e2e); removed after the module."""
    made = build_fixture_images(pytestconfig, tmp_path_factory, run_id)
    yield made
    release(made)


@pytest.fixture(scope="module")
def fixture_bases(fixture_set: dict[str, Any]) -> dict[str, str]:
    bases: dict[str, str] = fixture_set["bases"]
    return bases


@pytest.fixture(scope="module")
def fixture_images(fixture_set: dict[str, Any]) -> dict[str, str]:
    images: dict[str, str] = fixture_set["arch_images"]
    return images


@pytest.mark.parametrize("arch", VENDOR_ARCHES)
def test_vendor_image_installs_offline_on_top_of_its_base(
    arch: str, docker: Any, fixture_images: dict[str, str], fixture_bases: dict[str, str]
) -> None:
    image = docker.images.get(fixture_images[arch])
    family = "kunlun" if arch == "kunlun" else "rocm"
    base_layers = docker.images.get(fixture_bases[family]).attrs["RootFS"]["Layers"]
    assert image.attrs["RootFS"]["Layers"][: len(base_layers)] == base_layers
    assert image.labels["io.sglx.arch"] == arch
    # The fixture base has no torch (the real one does): sglang is installed, not imported.
    code, out = run_container(
        docker,
        image.id,
        [
            "-c",
            "import importlib.metadata as m, fastapi, transformers, sglx_platform; "
            "print(m.version('sglang'), m.version('sglx-platform'))",
        ],
        entrypoint="/opt/sglx/venv/bin/python",
    )
    assert code == 0, out
    assert out.split() == ["0.5.23", "0.1.0"]


def run_container(docker: Any, tag: str, argv: list[str], **kwargs: Any) -> tuple[int, str]:
    """Run to completion; (exit code, stdout). No network: the fixtures need none."""
    container = docker.containers.run(tag, argv, detach=True, network_mode="none", **kwargs)
    try:
        code = container.wait(timeout=600)["StatusCode"]
        return code, container.logs(stdout=True, stderr=False).decode()
    finally:
        container.remove(force=True)


@pytest.mark.parametrize("arch", VENDOR_ARCHES)
def test_vendor_container_preflight_reports_the_missing_device(
    arch: str, docker: Any, fixture_images: dict[str, str]
) -> None:
    code, out = run_container(
        docker,
        fixture_images[arch],
        ["--json", "--no-device-init"],
        entrypoint="/opt/sglx/venv/bin/sglx-preflight",
    )
    assert code == 1
    checks = {c["check"]: c for c in json.loads(out)["data"]["checks"]}
    assert checks["arch"]["status"] == "fail"
    assert checks["arch"]["class"] == "device_init_failed"
    required = [
        c for name, c in checks.items() if name.startswith("device /dev/") and c["status"] == "fail"
    ]
    assert required and all(c["class"] == "device_init_failed" for c in required)
    libraries = [c for name, c in checks.items() if name.startswith("library ")]
    assert libraries and all(c["status"] == "pass" for c in libraries)  # fixture libs load
    if load_profile(arch).platform.vendor is not None:  # sglang-kunlun, as the base carries it
        assert checks["vendor_platform"]["status"] == "pass", checks["vendor_platform"]


def test_vendor_entrypoint_stops_before_serving_without_the_device(
    docker: Any, fixture_images: dict[str, str]
) -> None:
    code, out = run_container(docker, fixture_images["gfx942"], [])
    assert code == 1
    assert "device_init_failed" in out
    assert "preflight failed" in out


def test_base_load_refuses_a_damaged_archive(tmp_path: Path) -> None:
    archive = tmp_path / "base.tar"
    archive.write_bytes(b"not really an image")
    (tmp_path / "base.tar.sha256").write_text("0" * 64 + "  base.tar\n")
    code = main(["base", "load", str(archive), "-q"])
    assert code == 2


def test_base_load_takes_an_oci_layout(
    docker: Any, cpu_base: str, run_id: str, tmp_path: Path
) -> None:
    """An OCI image layout tar (what newer tools save) loads into this engine too."""
    saved = tmp_path / "saved.tar"
    with saved.open("wb") as handle:
        for chunk in docker.images.get(cpu_base).save(named=True):
            handle.write(chunk)
    oci = tmp_path / "oci.tar"
    _docker_archive_to_oci(saved, oci, ref=f"sglx-test/oci-loaded:{run_id}")
    digest = hashlib.sha256(oci.read_bytes()).hexdigest()
    tag = f"sglx-test/oci-loaded:{run_id}"
    try:
        assert main(["base", "load", str(oci), "--sha256", digest, "-q"]) == 0
        loaded = docker.images.get(tag).attrs["RootFS"]["Layers"]
        assert loaded == docker.images.get(cpu_base).attrs["RootFS"]["Layers"]
    finally:
        remove_images(docker, tag)


def _docker_archive_to_oci(src: Path, dst: Path, ref: str) -> None:
    """Re-pack a `docker save` tar as an OCI image layout (blobs by sha256, index.json)."""
    with tarfile.open(src) as tar:
        (entry,) = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
        blobs: dict[str, bytes] = {}

        def blob(data: bytes, media: str) -> dict[str, Any]:
            digest = hashlib.sha256(data).hexdigest()
            blobs[digest] = data
            return {"mediaType": media, "digest": f"sha256:{digest}", "size": len(data)}

        config = blob(
            tar.extractfile(entry["Config"]).read(),  # type: ignore[union-attr]
            "application/vnd.oci.image.config.v1+json",
        )
        layers = [
            blob(
                tar.extractfile(layer).read(),  # type: ignore[union-attr]
                "application/vnd.oci.image.layer.v1.tar",
            )
            for layer in entry["Layers"]
        ]
    manifest = blob(
        json.dumps(
            {
                "schemaVersion": 2,
                "config": config,
                "layers": layers,
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
            }
        ).encode(),
        "application/vnd.oci.image.manifest.v1+json",
    )
    manifest["annotations"] = {"org.opencontainers.image.ref.name": ref}
    files = {
        "oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
        "index.json": json.dumps({"schemaVersion": 2, "manifests": [manifest]}).encode(),
    }
    files.update({f"blobs/sha256/{d}": data for d, data in blobs.items()})
    with tarfile.open(dst, "w") as out:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            out.addfile(info, io.BytesIO(data))
