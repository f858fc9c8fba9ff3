"""Bad input and interrupted runs: a clear error, and nothing left where DST (or its stage) was."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers.signals import default_sigint
from weights_helpers import (
    copy_checkpoint,
    demo_checkpoint,
    listing,
    rewrite_header,
    save_tensors,
    scratch,
)

from sglx.cli import main
from sglx.weights import writer
from sglx.weights.convert import convert_weights
from sglx.weights.transform import Block, Output
from sglx_core.errors import SglxError
from sglx_core.profile import load_profile


def _sharded() -> Path:
    return copy_checkpoint(demo_checkpoint("llama", "float32", "40KB"), "sharded")


def _single() -> Path:
    return copy_checkpoint(demo_checkpoint("qwen2", "float32"), "single")


def _index(src: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((src / "model.safetensors.index.json").read_text())
    return document


def _missing_shard(src: Path) -> None:
    sorted(src.glob("model-*.safetensors"))[-1].unlink()


def _index_names_missing_tensor(src: Path) -> None:
    index = _index(src)
    index["weight_map"]["model.layers.9.mlp.up_proj.weight"] = "model-00001-of-00004.safetensors"
    (src / "model.safetensors.index.json").write_text(json.dumps(index))


def _index_names_a_nul_shard(src: Path) -> None:
    """Issue 37 item 8/14: a NUL in a shard name made every path call raise a bare ValueError."""
    index = _index(src)
    index["weight_map"]["model.norm.weight"] = "model-00001\u0000-of-00004.safetensors"
    (src / "model.safetensors.index.json").write_text(json.dumps(index))


def _stale_index(src: Path) -> None:
    index = _index(src)
    del index["weight_map"]["model.norm.weight"]
    (src / "model.safetensors.index.json").write_text(json.dumps(index))


def _shard_not_in_index(src: Path) -> None:
    index = _index(src)
    index["weight_map"] = {
        k: v for k, v in index["weight_map"].items() if v != "model-00004-of-00004.safetensors"
    }
    (src / "model.safetensors.index.json").write_text(json.dumps(index))


def _truncated_header(src: Path) -> None:
    path = src / "model.safetensors"
    path.write_bytes(path.read_bytes()[:200])


def _truncated_data(src: Path) -> None:
    path = src / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-10])


def _tiny_file(src: Path) -> None:
    (src / "model.safetensors").write_bytes(b"\x01\x02")


def _unknown_dtype(src: Path) -> None:
    def edit(header: dict[str, Any]) -> None:
        header["lm_head.weight"]["dtype"] = "F12"

    rewrite_header(src / "model.safetensors", edit)


def _wrong_size(src: Path) -> None:
    def edit(header: dict[str, Any]) -> None:
        header["lm_head.weight"]["shape"] = [3, 3]

    rewrite_header(src / "model.safetensors", edit)


def _no_weights(src: Path) -> None:
    (src / "model.safetensors").rename(src / "pytorch_model.bin")


def _two_files_no_index(src: Path) -> None:
    (src / "model.safetensors.index.json").unlink()


def _garbled_index(src: Path) -> None:
    (src / "model.safetensors.index.json").write_text('{"weight_map": ')


@pytest.mark.parametrize(
    ("make", "damage", "code", "words"),
    [
        (_sharded, _missing_shard, "missing_shard", "missing"),
        (_sharded, _index_names_missing_tensor, "missing_tensor", "model.layers.9.mlp.up_proj"),
        (_sharded, _stale_index, "index_mismatch", "model.norm.weight"),
        (_sharded, _index_names_a_nul_shard, "corrupt", "not a file in the checkpoint folder"),
        (_sharded, _shard_not_in_index, "index_mismatch", "model-00004-of-00004"),
        (_sharded, _two_files_no_index, "missing_index", "index"),
        (_sharded, _garbled_index, "corrupt", "index"),
        (_single, _truncated_header, "truncated", "truncated header"),
        (_single, _tiny_file, "truncated", "8-byte header length"),
        (_single, _truncated_data, "truncated", "truncated data"),
        (_single, _unknown_dtype, "unknown_dtype", "F12"),
        (_single, _wrong_size, "corrupt", "lm_head.weight"),
        (_single, _no_weights, "usage", "pytorch_model.bin"),
    ],
)
def test_damaged_input_is_refused_with_a_clear_error_and_nothing_written(
    make: Callable[[], Path], damage: Callable[[Path], None], code: str, words: str
) -> None:
    src = make()
    damage(src)
    parent = scratch("out")

    with pytest.raises(SglxError) as caught:
        convert_weights(src, parent / "dst", load_profile("gfx942"))

    assert caught.value.code == code
    assert words in caught.value.message
    assert caught.value.hint
    assert listing(parent) == []


@pytest.mark.parametrize(
    ("value", "arch", "code", "words"),
    [
        (float("nan"), "cpu", "non_finite", "1 NaN"),
        (float("inf"), "gfx942", "non_finite", "1 Inf"),
        (1e5, "kunlun", "overflow", "beyond the range of F16"),
    ],
)
def test_non_finite_or_overflowing_values_stop_the_run_midway_with_nothing_left(
    value: float, arch: str, code: str, words: str
) -> None:
    weight = torch.randn(64, 64)
    weight[17, 3] = value
    tensors = {"a.weight": torch.randn(128, 128), "b.weight": weight}
    src = save_tensors(scratch("bad-values") / "src", tensors, config={"model_type": "llama"})
    parent = scratch("out")

    with pytest.raises(SglxError) as caught:
        convert_weights(src, parent / "dst", load_profile(arch))

    assert caught.value.code == code
    assert "'b.weight'" in caught.value.message and words in caught.value.message
    assert listing(parent) == []  # the staging folder is gone too


def test_existing_dst_is_never_touched() -> None:
    src = demo_checkpoint("qwen2", "float32")
    dst = scratch("exists") / "dst"
    dst.mkdir()
    (dst / "keep.txt").write_text("mine")

    with pytest.raises(SglxError) as caught:
        convert_weights(src, dst, load_profile("cpu"))

    assert caught.value.code == "dst_exists"
    assert listing(dst) == ["keep.txt"] and (dst / "keep.txt").read_text() == "mine"
    assert listing(dst.parent) == ["dst"]


def test_a_failure_in_the_middle_removes_the_staging_folder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    src = demo_checkpoint("llama", "float32", "40KB")
    parent = scratch("fail")
    real = writer.convert_block
    calls = 0

    def failing(block: Block) -> Output:
        nonlocal calls
        calls += 1
        if calls == 5:
            raise OSError(28, "No space left on device")
        return real(block)

    monkeypatch.setattr(writer, "convert_block", failing)

    with pytest.raises(SglxError, match="No space left") as caught:
        convert_weights(src, parent / "dst", load_profile("gfx942"), jobs=1)

    assert caught.value.code == "write_failed"
    assert calls >= 5
    assert listing(parent) == []


INTERRUPTED_RUN = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from sglx_core.profile import load_profile
    from sglx.weights.convert import convert_weights

    def progress(message):
        if message.startswith("shard 1/"):
            os.kill(os.getpid(), getattr(signal, sys.argv[3]))

    try:
        convert_weights(Path(sys.argv[1]), Path(sys.argv[2]), load_profile("gfx942"),
                        jobs=1, progress=progress)
    except KeyboardInterrupt:
        sys.exit(130)
    sys.exit(0)
    """
)


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_an_interrupted_run_leaves_neither_dst_nor_staging(signame: str) -> None:
    src = demo_checkpoint("llama", "float32", "40KB")
    parent = scratch("interrupted")

    proc = subprocess.run(
        [sys.executable, "-c", INTERRUPTED_RUN, str(src), str(parent / "dst"), signame],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        preexec_fn=default_sigint,
    )

    assert proc.returncode == 130, proc.stderr
    assert listing(parent) == []


def test_cli_errors_exit_2_with_the_code_in_json(capsys: pytest.CaptureFixture[str]) -> None:
    src = _single()
    _truncated_data(src)
    parent = scratch("cli")

    code = main(["weights", "convert", str(src), str(parent / "dst"), "--json"])
    envelope = json.loads(capsys.readouterr().out)

    assert code == 2 and envelope["status"] == "error"
    assert envelope["errors"][0]["code"] == "truncated"
    assert listing(parent) == []

    code = main(["weights", "convert", str(src), str(parent / "dst"), "--max-shard-size", "big"])
    assert code == 2
    assert "shard size 'big'" in capsys.readouterr().err


def test_missing_parent_folder_is_a_usage_error() -> None:
    with pytest.raises(SglxError, match="does not exist") as caught:
        convert_weights(
            demo_checkpoint("qwen2", "float32"),
            scratch("noparent") / "a" / "dst",
            load_profile("cpu"),
        )
    assert caught.value.code == "usage"


def test_sigterm_handler_is_restored_after_a_run() -> None:
    before = signal.getsignal(signal.SIGTERM)
    convert_weights(
        demo_checkpoint("qwen2", "float32"), scratch("sig") / "dst", load_profile("cpu")
    )
    assert signal.getsignal(signal.SIGTERM) == before
