"""Each arch applies its profile's defaults and refusals to sglang's real ServerArgs.

`apply` runs the platform hook exactly the way sglang's resolution pipeline does
(`record_foreign_defaults`, after snapshotting the raw input), then reads the resolved fields.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.platforms import apply, platform_for
from helpers.profiles import bake

from sglx_core.profile import known_arches, load_profile
from sglx_platform.failures import FailureClass, PlatformError
from sglx_platform.platforms.base import server_arg_defaults
from sglx_platform.server_args import unknown_fields


@pytest.fixture(scope="module")
def demo_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from sglx.demo_model import make_demo_model

    return make_demo_model(tmp_path_factory.mktemp("model") / "demo")


def test_every_profile_names_real_server_args_fields() -> None:
    known = set(server_arg_defaults())
    for arch in known_arches():
        assert unknown_fields(load_profile(arch), known) == [], arch


def test_gfx1151_defaults_to_triton_attention(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, demo_model: Path
) -> None:
    view = apply("gfx1151", [], tmp_path, monkeypatch, demo_model)
    assert view.attention_backend == "triton"
    assert view.mem_fraction_static == 0.85
    assert view.context_length == 8192
    assert view.max_running_requests == 16


def test_a_users_explicit_flag_wins_over_a_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, demo_model: Path
) -> None:
    view = apply(
        "gfx1151",
        ["--attention-backend", "torch_native", "--mem-fraction-static", "0.7"],
        tmp_path,
        monkeypatch,
        demo_model,
    )
    assert view.attention_backend == "torch_native"
    assert view.mem_fraction_static == 0.7


def test_gfx1151_refuses_fp8_kv_cache_and_says_what_to_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, demo_model: Path
) -> None:
    with pytest.raises(PlatformError) as caught:
        apply("gfx1151", ["--kv-cache-dtype", "fp8_e4m3"], tmp_path, monkeypatch, demo_model)
    assert caught.value.failure is FailureClass.CONFIG_REFUSED
    assert "--kv-cache-dtype fp8_e4m3: gfx11 has no FP8 hardware" in caught.value.detail
    assert "use --kv-cache-dtype auto" in caught.value.detail


def test_gfx1151_only_warns_about_fp8_checkpoints(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    demo_model: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    view = apply("gfx1151", ["--quantization", "fp8"], tmp_path, monkeypatch, demo_model)
    assert view.quantization == "fp8"
    # sglang routes logging to stderr with its own handler
    assert "sglx: --quantization fp8: no FP8/FP4 hardware on gfx11" in capfd.readouterr().err


def test_gfx942_refuses_e5m2_kv_cache_but_takes_e4m3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, demo_model: Path
) -> None:
    view = apply("gfx942", ["--kv-cache-dtype", "fp8_e4m3"], tmp_path, monkeypatch, demo_model)
    assert view.kv_cache_dtype == "fp8_e4m3"
    assert view.attention_backend is None  # sglang's in-tree HIP heuristic picks aiter later
    with pytest.raises(PlatformError, match="stores fp8_e5m2 as the platform's e4m3"):
        apply("gfx942", ["--kv-cache-dtype", "fp8_e5m2"], tmp_path, monkeypatch, demo_model)


def test_gfx942_refuses_mxfp4_which_gfx950_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, demo_model: Path
) -> None:
    with pytest.raises(PlatformError, match="needs gfx950's FP4 units"):
        apply("gfx942", ["--quantization", "mxfp4"], tmp_path, monkeypatch, demo_model)
    view = apply("gfx950", ["--quantization", "mxfp4"], tmp_path, monkeypatch, demo_model)
    assert view.quantization == "mxfp4"


def test_kunlun_turns_off_its_disabled_features(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, demo_model: Path
) -> None:
    view = apply("kunlun", [], tmp_path, monkeypatch, demo_model)
    assert view.attention_backend == "kunlun"
    assert view.page_size == 128
    assert view.disable_cuda_graph is True
    assert view.disable_radix_cache is True
    assert view.disable_overlap_schedule is True
    assert view.disable_custom_all_reduce is True
    assert view.grammar_backend == "none"


def resolved_graphs(
    arch: str, argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: Path
) -> tuple[str, str]:
    """sglang's own CUDA-graph resolution, then the platform hook, in the order of sglang's
    pipeline (wheel:srt/arg_groups/pipeline.py): the (decode, prefill) capture backends the
    graph runners read, not the flags."""
    from sglang.srt.arg_groups.arg_utils import record_fields
    from sglang.srt.arg_groups.cuda_graph_hook import handle_cuda_graph_config
    from sglang.srt.arg_groups.overrides import record_foreign_defaults, resolving_view
    from sglang.srt.server_args import prepare_server_args

    platform = platform_for(arch, tmp_path, monkeypatch)
    args = prepare_server_args(["--model-path", str(model), *argv])
    args._raw_input = {f.name: getattr(args, f.name) for f in record_fields(type(args))}
    handle_cuda_graph_config(args)
    record_foreign_defaults(args, f"platform:{arch}", platform.apply_server_args_defaults)
    config = resolving_view(args).cuda_graph_config
    return config.decode.backend, config.prefill.backend


def test_kunlun_captures_no_graph_in_either_phase(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, demo_model: Path
) -> None:
    """Issue 40 item 6: the profile's disable_cuda_graph is written after sglang resolved its
    graph config; it must reach that config, prefill included. A phase the user chose a
    capture for keeps it, as sglang ranks a per-phase flag above --disable-cuda-graph."""
    assert resolved_graphs("kunlun", [], tmp_path, monkeypatch, demo_model) == (
        "disabled",
        "disabled",
    )
    chosen = ["--cuda-graph-backend-prefill", "breakable"]
    assert resolved_graphs("kunlun", chosen, tmp_path, monkeypatch, demo_model) == (
        "disabled",
        "breakable",
    )


def test_kunlun_refuses_a_forced_off_feature(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, demo_model: Path
) -> None:
    with pytest.raises(PlatformError) as caught:
        apply("kunlun", ["--enable-torch-compile"], tmp_path, monkeypatch, demo_model)
    assert "torch_compile is off on kunlun" in caught.value.detail


def test_kunlun_refuses_speculative_decoding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, demo_model: Path
) -> None:
    with pytest.raises(PlatformError, match="speculative decoding is not supported on kunlun"):
        apply("kunlun", ["--speculative-algorithm", "EAGLE"], tmp_path, monkeypatch, demo_model)


def test_cpu_bounds_the_kv_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, demo_model: Path
) -> None:
    view = apply("cpu", [], tmp_path, monkeypatch, demo_model)
    assert view.max_total_tokens == 4096
    assert view.mem_fraction_static == 0.05
    assert view.device == "cpu"
    with pytest.raises(PlatformError, match=r"--mem-fraction-static 0\.9: above 0\.5 on cpu"):
        apply("cpu", ["--mem-fraction-static", "0.9"], tmp_path, monkeypatch, demo_model)


def test_cpu_refuses_gpu_attention_backends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, demo_model: Path
) -> None:
    with pytest.raises(PlatformError, match="use --attention-backend torch_native"):
        apply("cpu", ["--attention-backend", "triton"], tmp_path, monkeypatch, demo_model)


def test_cpu_refuses_expert_parallelism_and_takes_tensor_parallelism(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, demo_model: Path
) -> None:
    """sglang 0.5.23's CPU MoE path cannot serve --ep-size 2 (the cpu profile's rule, with its
    source); the nearest configuration it serves, the experts split by --tp alone, passes."""
    with pytest.raises(PlatformError, match=r"--ep-size 2:.*fused_moe_native\.py:77"):
        apply("cpu", ["--tp", "2", "--ep-size", "2"], tmp_path, monkeypatch, demo_model)
    view = apply("cpu", ["--tp", "2", "--ep-size", "1"], tmp_path, monkeypatch, demo_model)
    assert (view.tp_size, view.ep_size) == (2, 1)


def test_cpu_platform_survives_sglangs_whole_resolution(tmp_path: Path, demo_model: Path) -> None:
    """The full pipeline (resolve_once) in a fresh process, where sglang resolves an attention
    backend of its own before the platform hook runs."""
    import json
    import os
    import subprocess
    import sys

    script = (
        "import json, sys\n"
        "from sglang.srt.server_args import prepare_server_args\n"
        "from sglang.srt.arg_groups.overrides import resolution_result\n"
        "args = prepare_server_args(['--model-path', sys.argv[1]])\n"
        "args.resolve_once()\n"
        "print(json.dumps({f: resolution_result(args, f) for f in "
        "('attention_backend', 'max_total_tokens', 'device', 'sampling_backend')}))\n"
    )
    env = {
        **os.environ,
        "SGLANG_PLATFORM": "sglx",
        "SGLX_PROFILE": str(bake("cpu", tmp_path / "arch.yaml")),
    }
    proc = subprocess.run(
        [sys.executable, "-c", script, str(demo_model)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    resolved = json.loads(proc.stdout.strip().splitlines()[-1])
    assert resolved == {
        "attention_backend": "torch_native",
        "max_total_tokens": 4096,
        "device": "cpu",
        "sampling_backend": "pytorch",
    }
