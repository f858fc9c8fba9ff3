"""Where each launch setting comes from: user argument, docker run -e, serving profile, arch
default; a user flag that overrides a profile value is recorded with the value it replaced."""

from __future__ import annotations

import pytest
from helpers import model_configs

from sglx_core.errors import SglxError
from sglx_core.profile import load_profile
from sglx_core.serving.hardware import Accelerators
from sglx_core.serving.model import model_from_config
from sglx_core.serving.resolve import LAYERS, parse_flags, resolve
from sglx_core.serving.select import choose

GIB = 1024**3
MI300X_8 = Accelerators("rocm", "MI300X", 8, 192 * GIB, {"gfx_target_version": "90402"})
P800_8 = Accelerators("kunlun", "P800", 8, 96 * GIB, {"device_id": "0x3686"})


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--tp", "4"], {"--tp": "4"}),
        (["--tp-size=2"], {"--tp": "2"}),
        (
            ["--tensor-parallel-size", "4", "--trust-remote-code"],
            {"--tp": "4", "--trust-remote-code": None},
        ),
        (
            ["--disable-radix-cache", "--context-length", "8192"],
            {"--disable-radix-cache": None, "--context-length": "8192"},
        ),
        (["--tp", "2", "--tp", "4"], {"--tp": "4"}),
    ],
)
def test_parse_flags(argv: list[str], expected: dict[str, str | None]) -> None:
    assert parse_flags(argv) == expected


def test_profile_values_and_provenance() -> None:
    profile = load_profile("gfx942")
    shape = model_from_config(model_configs.config("llama-3.1-70b"))
    chosen = choose(profile, MI300X_8, shape)
    result = resolve(profile, chosen, [], {}, shape, MI300X_8)
    assert result.argv == ["--tp", "8", "--mem-fraction-static", "0.8"]
    layers = {s.name: (s.value, s.layer, s.overrides) for s in result.settings}
    assert layers["--tp"] == ("8", "serving profile", None)
    assert layers["--mem-fraction-static"] == ("0.8", "serving profile", None)
    assert all(s.layer in LAYERS for s in result.settings)
    assert result.capacity is not None and result.capacity.fits and result.capacity.tp == 8


def test_user_flag_overrides_profile_value() -> None:
    """--tp-size 4 after the profile's --tp 8: argparse keeps the last, and the override is
    recorded with the value it replaced; the capacity check runs at the user's TP."""
    profile = load_profile("gfx942")
    shape = model_from_config(model_configs.config("llama-3.1-70b"))
    chosen = choose(profile, MI300X_8, shape)
    result = resolve(
        profile, chosen, ["--tp-size", "4", "--context-length", "4096"], {}, shape, MI300X_8
    )
    assert result.argv == [
        "--tp",
        "8",
        "--mem-fraction-static",
        "0.8",
        "--tp-size",
        "4",
        "--context-length",
        "4096",
    ]
    layers = {s.name: s for s in result.settings}
    assert (layers["--tp"].value, layers["--tp"].layer, layers["--tp"].overrides) == (
        "4",
        "user argument",
        "8",
    )
    assert layers["--context-length"].layer == "user argument"
    assert layers["--context-length"].overrides is None
    assert result.capacity is not None
    assert (result.capacity.tp, result.capacity.context_length) == (4, 4096)


def test_docker_run_env_wins_and_arch_defaults_are_listed() -> None:
    profile = load_profile("kunlun")
    shape = model_from_config(model_configs.config("llama-3.1-8b"))
    chosen = choose(profile, P800_8, shape)
    serving = chosen.profile.model_copy(
        update={"env": {"XPU_TEST": "1"}, "sources": {**chosen.profile.sources, "XPU_TEST": "test"}}
    )
    chosen = type(chosen)(chosen.name, chosen.status, chosen.reason, None, serving)
    result = resolve(profile, chosen, ["--page-size", "64"], {"XPU_TEST": "0"}, shape, P800_8)
    layers = {s.name: s for s in result.settings}
    assert (layers["XPU_TEST"].value, layers["XPU_TEST"].layer, layers["XPU_TEST"].overrides) == (
        "0",
        "docker run -e",
        "1",
    )
    assert result.env == {}
    assert (layers["--attention-backend"].value, layers["--attention-backend"].layer) == (
        "kunlun",
        "arch default",
    )
    assert (layers["--page-size"].value, layers["--page-size"].layer) == ("64", "user argument")
    assert layers["--disable-cuda-graph"].layer == "arch default"


def test_long_context_cut_is_budgeted() -> None:
    """aiter above 8192 tokens: sglang multiplies the fraction by 0.85 (PR #37242)."""
    profile = load_profile("gfx942")
    shape = model_from_config(model_configs.config("llama-3.1-8b"))
    chosen = choose(profile, MI300X_8, shape)
    long = resolve(profile, chosen, [], {}, shape, MI300X_8).capacity
    short = resolve(profile, chosen, ["--context-length", "8192"], {}, shape, MI300X_8).capacity
    honoured = resolve(
        profile, chosen, [], {"SGLANG_AITER_HONOR_EXPLICIT_MEM_FRACTION": "1"}, shape, MI300X_8
    ).capacity
    assert long is not None and short is not None and honoured is not None
    assert long.mem_fraction == pytest.approx(0.8 * 0.85)
    assert short.mem_fraction == pytest.approx(0.8)
    assert honoured.mem_fraction == pytest.approx(0.8)


def test_decode_context_parallelism_is_offered_where_the_profile_says_sglang_serves_it() -> None:
    """CDNA's profiles name the attention backends whose 0.5.23 code has the DCP path (aiter,
    triton); the same long-context refusal on the cpu profile's torch_native offers no
    --dcp-size."""
    shape = model_from_config(model_configs.config("deepseek-v2"))
    profile = load_profile("gfx942")
    chosen = choose(profile, MI300X_8, shape)
    argv = ["--tp", "8", "--context-length", "2000000"]  # 1.1 M tokens fit at TP 8
    capacity = resolve(profile, chosen, argv, {}, shape, MI300X_8).capacity
    assert capacity is not None and not capacity.fits
    assert any(f.startswith("Use --dcp-size ") for f in capacity.fixes), capacity.fixes
    forced = resolve(profile, chosen, [*argv, "--attention-backend", "wave"], {}, shape, MI300X_8)
    assert forced.capacity is not None
    assert not any("--dcp-size" in f for f in forced.capacity.fixes)
    assert load_profile("cpu").serving.decode_context_parallel is None
    assert load_profile("kunlun").serving.decode_context_parallel is None


def test_pipeline_stages_and_their_split_reach_the_capacity_check() -> None:
    """`--pp-size` (or its alias `--pipeline-parallel-size`) and the container's
    SGLANG_PP_LAYER_PARTITION size the check by the largest stage; a partition sglang would
    refuse is refused before the start, naming it."""
    profile = load_profile("gfx942")
    shape = model_from_config(model_configs.config("llama-3.1-70b"))
    chosen = choose(profile, MI300X_8, shape)
    for flag in ("--pp-size", "--pipeline-parallel-size"):
        capacity = resolve(profile, chosen, [flag, "2"], {}, shape, MI300X_8).capacity
        assert capacity is not None and (capacity.pp, capacity.stage_layers) == (2, 40)
    split = {"SGLANG_PP_LAYER_PARTITION": "50,30"}
    capacity = resolve(profile, chosen, ["--pp-size", "2"], split, shape, MI300X_8).capacity
    assert capacity is not None and capacity.stage_layers == 50
    with pytest.raises(SglxError, match="does not split the model's 80 layers into 2 stages"):
        resolve(profile, chosen, ["--pp-size", "2"], {"SGLANG_PP_LAYER_PARTITION": "40"}, shape,
                MI300X_8)  # fmt: skip
