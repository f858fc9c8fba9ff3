"""Prebuilt Triton caches: compiled on this CPU machine for AMD targets with the real Triton
(sglx_kernels.warm), keyed and checked (sglx_core.triton_cache), installed into a node-local
cache only where the key fits the devices (sglx_runtime.warm_cache).

The compiles are real: PyPI's Triton carries the AMD backend and its linker, so a CPU-only
process makes the code objects a gfx942 or gfx1151 device would load. Whether the keys equal
the ones a device computes is shown on a GPU (bench/kernels/results/h200_warm_cache.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.model_configs import config, write_model
from helpers.serving_fixtures import mi300x_host, mi355x_host

from sglx_core.errors import SglxError
from sglx_core.profile import load_profile
from sglx_core.triton_cache import MANIFEST, read_manifest
from sglx_runtime import warm_cache

pytest.importorskip("triton")

SPEC = {
    "dtype": "bfloat16",
    "tokens": [1, 3, 16],
    "shapes": [
        {
            "hidden_size": 256,
            "head_dim": 64,
            "heads": 4,
            "kv_heads": 2,
            "intermediate_size": 512,
            "rotary_dim": 64,
            "max_positions": 128,
        }
    ],
}
# A small Llama-shaped model: the layer widths are what the compile depends on.
SMALL = config("qwen2.5-0.5b", hidden_size=256, intermediate_size=512, num_attention_heads=8,
               num_key_value_heads=2, max_position_embeddings=256)  # fmt: skip


def _warm(target: str, cache: Path, spec_file: Path) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "sglx_kernels.warm", "--target", target, "--spec", str(spec_file)],
        env={**os.environ, "TRITON_CACHE_DIR": str(cache)},
        capture_output=True, text=True, check=True, timeout=300,
    )  # fmt: skip
    report: dict = json.loads(done.stdout)
    return report


def _entries(cache: Path) -> set[str]:
    return {p.name for p in cache.iterdir() if p.is_dir()}


@pytest.fixture(scope="module")
def spec_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("spec") / "spec.json"
    path.write_text(json.dumps(SPEC))
    return path


@pytest.mark.parametrize(
    ("target", "gfx"), [("hip:gfx942:64", "gfx942"), ("hip:gfx1151:32", "gfx1151")]
)
def test_kernels_compile_for_an_amd_target_without_its_device(
    tmp_path: Path, spec_file: Path, target: str, gfx: str
) -> None:
    report = _warm(target, tmp_path / "cache", spec_file)
    assert report["target"] == target
    assert set(report["calls"]) == {"rms_norm", "fused_add_rms_norm", "silu_and_mul",
                                    "rotary_embedding"}  # fmt: skip
    entries = _entries(tmp_path / "cache")
    assert len(entries) == len(report["kernels"]) > 0
    for entry in entries:
        (code,) = (tmp_path / "cache" / entry).glob("*.hsaco")
        assembly = next((tmp_path / "cache" / entry).glob("*.amdgcn")).read_text()
        assert f"amdgcn-amd-amdhsa--{gfx}" in assembly
        assert code.read_bytes()[:4] == b"\x7fELF"
    # A second process finds every entry under the key it computes: nothing compiles again.
    again = _warm(target, tmp_path / "cache", spec_file)
    assert _entries(tmp_path / "cache") == entries
    assert again["kernels"] == report["kernels"]


def test_a_target_that_is_not_one_is_refused(tmp_path: Path, spec_file: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sglx_kernels.warm", "--target", "hip:gfx942", "--spec",
         str(spec_file)],
        env={**os.environ, "TRITON_CACHE_DIR": str(tmp_path)},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "expected hip|cuda:ARCH:32|64" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The gfx942 profile's prebuilt cache for a small model, as the image build makes it."""
    root = tmp_path_factory.mktemp("image")
    model = write_model(root / "model", SMALL)
    out = root / "triton-cache"
    profile = load_profile("gfx942")
    manifest = warm_cache.build(profile, model, out)
    assert manifest.keys and manifest.entries
    return out


def test_the_build_writes_a_read_only_tree_and_a_manifest_keyed_by_target(built: Path) -> None:
    manifest = read_manifest(built)
    (key,) = manifest.keys
    assert (key.backend, key.arch, key.warp_size) == ("hip", "gfx942", 64)
    assert key.triton and len(key.kernels) == 64
    assert manifest.label().startswith(f"hip:gfx942:64 triton={key.triton} kernels=")
    assert set(manifest.entries) == {p.name for p in (built / "triton").iterdir()}
    assert all(not os.access(p, os.W_OK) or os.geteuid() == 0 for p in built.rglob("*"))
    assert oct((built / MANIFEST).stat().st_mode & 0o777) == "0o444"


def test_the_shapes_follow_the_model_at_each_tp_of_the_serving_profiles(tmp_path: Path) -> None:
    model = write_model(tmp_path / "m", "llama-3.1-8b")
    shapes = warm_cache.layer_shapes(load_profile("gfx942"), model)
    assert [(s["heads"], s["kv_heads"], s["intermediate_size"]) for s in shapes] == [
        (32, 8, 14336), (16, 4, 7168), (8, 2, 3584), (4, 1, 1792)
    ]  # fmt: skip
    assert {s["activation"] for s in shapes} == {"silu"}


def test_a_matching_host_gets_every_entry_once(built: Path, tmp_path: Path) -> None:
    profile = load_profile("gfx942")
    node = tmp_path / "node" / "triton"
    arches = warm_cache.device_arches(profile, mi300x_host(tmp_path / "host"))
    assert arches == {"gfx942"}
    first = warm_cache.install(profile, node, image_root=built, arches=arches)
    assert first.skipped is None and first.copied == len(read_manifest(built).entries)
    assert "entries copied" in first.line()
    again = warm_cache.install(profile, node, image_root=built, arches=arches)
    assert (again.copied, again.present) == (0, first.copied)
    assert not [p for p in node.iterdir() if p.name.startswith(".")]  # no staging left


def test_a_gfx942_cache_is_never_loaded_on_a_gfx950_host(built: Path, tmp_path: Path) -> None:
    profile = load_profile("gfx942")
    node = tmp_path / "node"
    arches = warm_cache.device_arches(load_profile("gfx950"), mi355x_host(tmp_path / "host"))
    result = warm_cache.install(profile, node, image_root=built, arches=arches)
    assert result.copied == 0
    assert result.skipped == "hip:gfx942:64: built for gfx942, and this host's devices are gfx950"
    assert not node.exists() or not any(node.iterdir())


def test_another_triton_or_other_kernel_sources_are_not_loaded(
    built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    profile = load_profile("gfx942")
    monkeypatch.setattr(warm_cache, "installed_triton", lambda: "3.9.0")
    result = warm_cache.install(profile, tmp_path / "a", image_root=built, arches={"gfx942"})
    assert result.skipped and "this image runs Triton 3.9.0" in result.skipped
    monkeypatch.undo()
    monkeypatch.setattr(warm_cache, "kernels_digest", lambda _: "0" * 64)
    result = warm_cache.install(profile, tmp_path / "b", image_root=built, arches={"gfx942"})
    assert result.skipped and "other sglx_kernels sources" in result.skipped


def test_an_image_without_a_prebuilt_cache_says_so(tmp_path: Path) -> None:
    result = warm_cache.install(load_profile("cpu"), tmp_path / "c", image_root=tmp_path / "none")
    assert result.line().startswith("prebuilt Triton cache not used: this image carries none")


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"entries": ["../../etc"]}, "entries holds '../../etc', not a plain name"),
        ({"entries": "x"}, "entries is not a list"),
        ({"keys": [{"backend": "hip"}]}, "keys holds"),
        ({"keys": []}, "0 keys"),
        ({"schema": 2}, "schema is 2, not 1"),
        (
            {
                "keys": [
                    {
                        "backend": "hip",
                        "arch": "gfx942",
                        "warp_size": "64",
                        "triton": "3.8.0",
                        "kernels": "x",
                    }
                ]
            },
            "keys.warp_size is '64', not of type int",
        ),
    ],
)
def test_a_damaged_manifest_is_refused_naming_the_field(
    built: Path, tmp_path: Path, change: dict, named: str
) -> None:
    document = {**json.loads((built / MANIFEST).read_text()), **change}
    (tmp_path / MANIFEST).write_text(json.dumps(document))
    with pytest.raises(SglxError) as caught:
        read_manifest(tmp_path)
    assert named in str(caught.value)


def test_an_oversized_manifest_is_refused_before_parsing(tmp_path: Path) -> None:
    with (tmp_path / MANIFEST).open("wb") as handle:
        handle.truncate((4 << 20) + 1)
    with pytest.raises(SglxError, match="larger than 4 MiB"):
        read_manifest(tmp_path)
