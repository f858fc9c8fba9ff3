"""`sglx weights convert` on hostile or broken input and on file systems that refuse writes.

Every case runs the real CLI and asserts the exit code, the error's code and words, that no
traceback is printed and that nothing is left where DST (or its staging folder) would go. The
read-only and full file systems are real tmpfs mounts (the tests run as root); they are skipped,
with the reason, only where mounting is refused.
"""

from __future__ import annotations

import json
import struct
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch
from weights_helpers import listing, save_tensors, scratch

from sglx.weights.bounded_json import MAX_CONFIG_BYTES, MAX_DEPTH

Cli = Callable[..., tuple[int, str, str]]
CliJson = Callable[..., tuple[int, dict[str, Any]]]
CONFIG = {"model_type": "llama"}


def _checkpoint(name: str, *, mib: int = 1, config: dict[str, Any] | None = CONFIG) -> Path:
    """A real safetensors checkpoint of `mib` MiB of float32 weights."""
    generator = torch.Generator().manual_seed(3)
    tensors = {
        f"layers.{i}.weight": torch.randn(256, 1024, generator=generator) for i in range(mib)
    }
    return save_tensors(scratch(name) / "src", tensors, config=config)


def _error(envelope: dict[str, Any]) -> dict[str, Any]:
    [error] = envelope["errors"]
    assert envelope["exit_code"] == 2
    found: dict[str, Any] = error
    return found


def _convert(cli: Cli, src: Path, dst: Path, arch: str = "cpu") -> tuple[int, str]:
    code, out, err = cli("weights", "convert", str(src), str(dst), "--arch", arch, "-q")
    assert "Traceback" not in out + err
    return code, err


# -- file systems that refuse the output ----------------------------------------------------


@contextmanager
def _tmpfs(options: str, run_id: str) -> Iterator[Path]:
    """A tmpfs mounted with `options` for the test's duration, unmounted and removed after."""
    point = Path(tempfile.mkdtemp(prefix=f"sglx-{run_id}-mnt-"))
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, f"sglx-{run_id}", str(point)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            pytest.skip(f"mount -t tmpfs -o {options} was refused: {done.stderr.strip()}")
        try:
            yield point
        finally:
            subprocess.run(["umount", str(point)], check=True)
    finally:
        point.rmdir()


def test_read_only_file_system_is_write_failed_naming_dst(sglx: Cli, run_id: str) -> None:
    src = _checkpoint("ro")
    with _tmpfs("ro,size=1m", run_id) as mount:
        dst = mount / "dst"
        code, err = _convert(sglx, src, dst)

        assert code == 2
        assert f"{dst}: writing the converted model failed: Read-only file system" in err
        assert "read-only file system: pick a DST on a writable one" in err
        assert listing(mount) == []


@pytest.mark.parametrize(
    ("arch", "how"),
    [("cpu", "float32 kept: kernel copy"), ("kunlun", "float16: converted and written")],
)
def test_full_file_system_is_write_failed_and_the_staging_folder_goes(
    arch: str, how: str, sglx_json: CliJson, run_id: str
) -> None:
    src = _checkpoint("full", mib=3)  # 3 MiB (1.5 MiB as float16) into 1 MiB
    with _tmpfs("size=1m", run_id) as mount:
        dst = mount / "dst"
        code, envelope = sglx_json("weights", "convert", str(src), str(dst), "--arch", arch, "-q")

        assert code == 2, how
        error = _error(envelope)
        assert error["code"] == "write_failed"
        assert error["path"] == str(dst)
        assert "No space left on device" in error["message"]
        assert str(dst) in error["message"]
        assert f"free space on the file system of {mount}" in error["hint"]
        assert listing(mount) == []


# -- broken checkpoints ---------------------------------------------------------------------


def test_empty_weight_map_beside_a_single_file_is_a_clear_error(sglx_json: CliJson) -> None:
    src = _checkpoint("empty-map")
    (src / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {}}))
    parent = scratch("out")

    code, envelope = sglx_json("weights", "convert", str(src), str(parent / "dst"), "-q")

    assert code == 2
    error = _error(envelope)
    assert error["code"] == "corrupt"
    assert "model.safetensors.index.json: the index names no shards" in error["message"]
    assert "weight_map is empty" in error["message"]
    assert "remove it if the folder's one *.safetensors file" in error["hint"]
    assert listing(parent) == []


def test_weights_without_any_tensor_are_refused(sglx: Cli) -> None:
    src = scratch("no-tensors") / "src"
    src.mkdir()
    (src / "config.json").write_text(json.dumps(CONFIG))
    (src / "model.safetensors").write_bytes(struct.pack("<Q", 8) + b"{}      ")
    parent = scratch("out")

    code, err = _convert(sglx, src, parent / "dst")

    assert code == 2
    assert "the weights hold no tensors (model.safetensors)" in err
    assert listing(parent) == []


def test_checkpoint_without_config_json_is_refused_before_writing(sglx_json: CliJson) -> None:
    src = _checkpoint("no-config", config=None)
    parent = scratch("out")

    code, envelope = sglx_json("weights", "convert", str(src), str(parent / "dst"), "-q")

    assert code == 2
    error = _error(envelope)
    assert error["code"] == "missing_config"
    assert error["path"] == str(src / "config.json")
    assert f"{src}: no config.json" in error["message"]
    assert "copy config.json from the original checkpoint" in error["hint"]
    assert listing(parent) == []


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _deep_config(src: Path, depth: int) -> Path:
    (src / "config.json").write_text('{"model_type": "llama", "extra": ' + _nested(depth) + "}")
    return src / "config.json"


def _deep_index(src: Path, depth: int) -> Path:
    weight_map = dict.fromkeys(_tensor_names(src), "model.safetensors")
    text = json.dumps({"weight_map": weight_map})[:-1] + ', "metadata": ' + _nested(depth) + "}"
    (src / "model.safetensors.index.json").write_text(text)
    return src / "model.safetensors.index.json"


def _deep_header(src: Path, depth: int) -> Path:
    path = src / "model.safetensors"
    header = ('{"x": ' + _nested(depth) + "}").encode()
    header += b" " * (-len(header) % 8)
    path.write_bytes(struct.pack("<Q", len(header)) + header)
    return path


def _tensor_names(src: Path) -> list[str]:
    raw = (src / "model.safetensors").read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    return [k for k in json.loads(raw[8 : 8 + length]) if k != "__metadata__"]


@pytest.mark.parametrize("depth", [MAX_DEPTH + 5, 100_000], ids=["past-the-bound", "recursion"])
@pytest.mark.parametrize(
    ("damage", "what"),
    [
        (_deep_config, "model config"),
        (_deep_index, "safetensors index"),
        (_deep_header, "safetensors header"),
    ],
    ids=["config", "index", "header"],
)
def test_deeply_nested_json_is_refused_naming_the_file(
    damage: Callable[[Path, int], Path], what: str, depth: int, sglx_json: CliJson
) -> None:
    src = _checkpoint("deep")
    path = damage(src, depth)
    parent = scratch("out")

    code, envelope = sglx_json("weights", "convert", str(src), str(parent / "dst"), "-q")

    assert code == 2
    error = _error(envelope)
    assert error["code"] == "corrupt"
    assert error["path"] == str(path)
    assert f"{path}: the {what} is nested more than {MAX_DEPTH} levels deep" in error["message"]
    assert f"re-copy {path.name}" in error["hint"]
    assert listing(parent) == []


def test_a_config_beyond_the_size_bound_is_refused_unread(sglx: Cli) -> None:
    src = _checkpoint("huge-config")
    with (src / "config.json").open("w") as handle:
        handle.write('{"model_type": "llama", "pad": "')
        handle.write("x" * MAX_CONFIG_BYTES)
        handle.write('"}')

    code, err = _convert(sglx, src, scratch("out") / "dst")

    assert code == 2
    assert f"{src / 'config.json'}: the model config is larger than 4 MiB" in err


def test_a_header_length_beyond_safetensors_limit_is_refused(sglx: Cli) -> None:
    src = _checkpoint("huge-header")
    path = src / "model.safetensors"
    with path.open("r+b") as handle:
        handle.write(struct.pack("<Q", 100_000_001))

    code, err = _convert(sglx, src, scratch("out") / "dst")

    assert code == 2
    assert f"{path}: header length field says 100000001 bytes (limit 100000000)" in err


def test_moderate_nesting_still_converts(sglx: Cli) -> None:
    """The bound refuses only what no exporter writes: nesting of a dozen levels is fine."""
    src = _checkpoint("nested-ok")
    _deep_config(src, 12)
    dst = scratch("out") / "dst"

    code, _ = _convert(sglx, src, dst)

    assert code == 0
    assert json.loads((dst / "config.json").read_text())["extra"] == json.loads(_nested(12))
    assert (dst / "sglx-weights.json").is_file()
