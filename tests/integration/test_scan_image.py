"""`sglx scan --image` and `--bundle` against the real Docker engine.

Fixture images are made with `docker import` from a root built here (gcc-built ROCm stand-ins,
see `fixture_rocm` in tests/unit/scan/test_scan_support.py): `sglx-test/fixture-rocm:<run_id>` is
complete for gfx942, `sglx-test/fixture-rocm-nohip:<run_id>` lacks the HIP runtime. Both carry
ENV LD_LIBRARY_PATH=/opt/extra, which one library needs to resolve. Images and archives are
removed at the end.
"""

from __future__ import annotations

import importlib
import sys
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.docker
CliJson = Callable[..., tuple[int, dict[str, Any]]]
UNIT_TESTS = Path(__file__).resolve().parents[1] / "unit" / "scan"


def support() -> Any:
    """The gcc fixture builders shared with the unit tests."""
    if str(UNIT_TESTS) not in sys.path:
        sys.path.insert(0, str(UNIT_TESTS))
    return importlib.import_module("test_scan_support")


def import_root(docker: Any, root: Path, ref: str) -> str:
    archive = root.with_suffix(".tar")
    with tarfile.open(archive, "w") as tar:
        tar.add(root, arcname=".")
    repository, _, tag = ref.partition(":")
    docker.api.import_image_from_file(
        str(archive),
        repository=repository,
        tag=tag,
        changes=["ENV LD_LIBRARY_PATH=/opt/extra", 'CMD ["/none"]'],
    )
    return ref


@pytest.fixture(scope="module")
def fixture_images(
    docker: Any, run_id: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    helpers = support()
    tmp = tmp_path_factory.mktemp("scan-image")
    cc = helpers.ElfFactory(tmp / "build")
    refs = {}
    for name, without in (("fixture-rocm", ()), ("fixture-rocm-nohip", ("libamdhip64.so.7",))):
        root = helpers.fixture_rocm(cc, tmp / name, without=without)
        extra = cc.lib(root / "opt/extra/libextra.so.1", libc=False)
        cc.lib(root / "opt/venv/other/libuses_extra.so", needs=[extra], libc=False)
        refs[name] = import_root(docker, root, f"sglx-test/{name}:{run_id}")
    yield refs
    for ref in refs.values():
        docker.images.remove(ref, force=True)


def codes(envelope: dict[str, Any]) -> set[str]:
    return {f["code"] for f in envelope["findings"]}


def test_complete_fixture_image_is_clean(
    fixture_images: dict[str, str], sglx_json: CliJson, docker: Any
) -> None:
    code, envelope = sglx_json(
        "scan", "--image", fixture_images["fixture-rocm"], "--arch", "gfx942"
    )
    assert (code, envelope["findings"]) == (0, [])
    [scan] = envelope["data"]["scans"]
    assert scan["kind"] == "image"
    assert scan["search"]["ld_library_path"] == ["/opt/extra"]
    assert scan["dependencies"]["unresolved"] == 0
    # The export container is gone, and no container of the image ever ran (other tests scan
    # other images at the same time, so only this image's containers count).
    left = docker.containers.list(
        all=True,
        filters={"label": "sglx.purpose=scan-export", "ancestor": fixture_images["fixture-rocm"]},
    )
    assert left == []


def test_missing_rocm_runtime_is_reported(
    fixture_images: dict[str, str], sglx_json: CliJson
) -> None:
    ref = fixture_images["fixture-rocm-nohip"]
    code, envelope = sglx_json("scan", "--image", ref, "--arch", "gfx942")
    assert code == 1
    assert {"required_missing", "dlopen_missing", "unresolved"} <= codes(envelope)
    required = [f for f in envelope["findings"] if f["code"] == "required_missing"]
    assert [f["message"].split(" (")[0] for f in required] == [
        "no library matching 'libamdhip64.so.7' in the image"
    ]


def test_saved_archive_in_a_bundle_gives_the_same_answer(
    fixture_images: dict[str, str],
    sglx_json: CliJson,
    docker: Any,
    tmp_path: Path,
) -> None:
    """The bundle's image, read from its chunks, scans as the image in the engine does."""
    from helpers.bundles import hand_bundle

    ref = fixture_images["fixture-rocm-nohip"]
    archive = tmp_path / "fixture-rocm-nohip.tar"
    with archive.open("wb") as out:
        for chunk in docker.images.get(ref).save(named=True):
            out.write(chunk)
    bundle = hand_bundle(tmp_path / "bundle", archive, {}, chunk_size=1 << 20)
    archive.unlink()
    _, from_image = sglx_json("scan", "--image", ref, "--arch", "gfx942")
    code, from_bundle = sglx_json("scan", "--bundle", str(bundle), "--arch", "gfx942")
    assert code == 1
    [scan] = from_bundle["data"]["scans"]
    assert scan["kind"] == "image_archive"
    assert scan["search"]["ld_library_path"] == ["/opt/extra"]
    image_scan = from_image["data"]["scans"][0]
    for key in ("elf_files", "dependencies", "unresolved", "violations"):
        assert scan[key] == image_scan[key], key


def test_unknown_image_is_a_usage_error(sglx_json: CliJson, run_id: str) -> None:
    code, envelope = sglx_json("scan", "--image", f"sglx-test/no-such-image:{run_id}")
    assert code == 2
    assert "no image" in envelope["errors"][0]["message"]
