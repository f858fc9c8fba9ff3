"""The launch-settings table (sglx_kernels/tuning.json): it validates, the most specific target
wins field by field, warps come from the warp size Triton reports, and every arch profile
that runs sglx's Triton kernels has an entry."""

from __future__ import annotations

import copy
import json
from importlib import resources
from typing import Any

import pytest

from sglx_kernels import tuning
from sglx_kernels._triton import TritonTarget
from sglx_kernels.registry import UnsupportedInput
from sglx_kernels.tuning import TuningTableError

H200 = TritonTarget("cuda", "sm90", 32)
MI300 = TritonTarget("hip", "gfx942", 64)
STRIX_HALO = TritonTarget("hip", "gfx1151", 32)


def _packaged() -> dict[str, Any]:
    text = resources.files("sglx_kernels").joinpath("tuning.json").read_text()
    return json.loads(text)  # type: ignore[no-any-return]


def test_the_packaged_table_validates() -> None:
    targets = tuning.table()
    assert {
        "default",
        "cuda",
        "hip",
        "hip:gfx942",
        "hip:gfx950",
        "hip:gfx1151",
        "interpreter",
    } <= set(targets)


def test_tuning_keys_go_from_arch_to_backend_to_default() -> None:
    assert MI300.tuning_keys == ("hip:gfx942", "hip", "default")
    assert TritonTarget("interpreter", "", 32).tuning_keys == ("interpreter", "default")


def test_the_most_specific_entry_wins_field_by_field() -> None:
    gated = tuning.family_tuning("gated", STRIX_HALO)
    assert gated.elements_per_program == 2048  # from hip:gfx1151
    norm = tuning.family_tuning("norm", STRIX_HALO)
    default_norm = tuning.family_tuning("norm", H200)
    assert norm.threads != default_norm.threads  # gfx1151 overrides threads ...
    assert norm.max_row_elements == default_norm.max_row_elements  # ... and inherits the rest


@pytest.mark.parametrize(("target", "warps"), [(H200, 8), (MI300, 4), (STRIX_HALO, 8)])
def test_warps_follow_the_reported_warp_size(target: TritonTarget, warps: int) -> None:
    assert tuning.num_warps(256, target) == warps
    assert tuning.num_warps(16, target) == 1


def test_short_rows_share_a_program_and_long_rows_get_more_threads() -> None:
    short = tuning.row_launch("rms_norm", "norm", 128, H200)
    assert (short.block_rows, short.block_cols) == (32, 128)
    long = tuning.row_launch("rms_norm", "norm", 8192, H200)
    assert (long.block_rows, long.block_cols) == (1, 8192)
    assert long.num_warps > short.num_warps
    wave64 = tuning.row_launch("rms_norm", "norm", 8192, MI300)
    assert wave64.num_warps * 64 == long.num_warps * 32  # same threads on wave64


def test_a_row_wider_than_one_program_is_unsupported_input() -> None:
    with pytest.raises(UnsupportedInput, match="a row of 70000 elements needs a block of 131072"):
        tuning.row_launch("rms_norm", "norm", 70000, H200)


def test_tiles_cap_columns_at_the_program_size() -> None:
    wide = tuning.tile_launch("gated", 16384, H200)
    assert (wide.block_rows, wide.block_cols) == (1, 4096)
    narrow = tuning.tile_launch("gated", 100, H200)
    assert narrow.block_cols == 128 and narrow.block_rows == 32


def test_tiles_prefer_a_width_that_divides_the_row() -> None:
    swiglu = tuning.tile_launch("gated", 14336, H200)  # 7 * 2048: no half-masked tile
    assert (swiglu.block_rows, swiglu.block_cols) == (2, 2048)
    ragged = tuning.tile_launch("gated", 4095, H200)  # no power-of-two divisor >= 256: keep width
    assert ragged.block_cols == 4096


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (
            lambda t: t["targets"]["default"]["norm"].update(elements_per_program=3000),
            "elements_per_program: 3000 is not a power of two",
        ),
        (
            lambda t: t["targets"]["cuda"].update(norm={"warps": 4}),
            r"targets.cuda.norm: unknown field\(s\) \['warps'\]",
        ),
        (
            lambda t: t["targets"]["default"]["gated"].update(threads=[[4096, 256], [1024, 128]]),
            "must ascend",
        ),
        (
            lambda t: t["targets"]["default"]["rotary"].update(threads=[[1024]]),
            "pairs of powers of two",
        ),
        (
            lambda t: t["targets"]["default"]["norm"].update(max_row_elements=1 << 20),
            "more than one program can hold",
        ),
        (
            lambda t: t["targets"]["default"].pop("gated"),
            r"targets.default.gated must set \['elements_per_program', 'threads'\]",
        ),
        (lambda t: t["targets"].pop("default"), "'default' entry"),
        (
            lambda t: t["targets"]["hip"].update(block=4),
            r"targets.hip: unknown key\(s\) \['block'\]",
        ),
        (lambda t: t.update(schema=2), '"schema": 1'),
    ],
)
def test_a_bad_table_names_the_key(edit: Any, match: str) -> None:
    table = copy.deepcopy(_packaged())
    edit(table)
    with pytest.raises(TuningTableError, match=match):
        tuning.validate_table(table)


def test_every_arch_running_sglx_triton_kernels_has_a_tuning_entry() -> None:
    profile = pytest.importorskip("sglx_core.profile", reason="the host tool is not installed here")
    targets = tuning.table()
    for arch in profile.known_arches():
        loaded = profile.load_profile(arch)
        if loaded.kernels.triton and arch.startswith("gfx"):
            assert f"hip:{arch}" in targets, (
                f"images/{arch}/arch.yaml runs Triton kernels but tuning.json has no hip:{arch}"
            )
