"""`sglx weights verify` and `sglx weights check`: each kind of damage becomes a finding."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
from weights_helpers import demo_checkpoint, header_of, rewrite_header, scratch

from sglx.cli import main
from sglx.weights import manifest_digest
from sglx.weights.check import LOGIT_TOLERANCE, check_weights
from sglx.weights.convert import convert_weights
from sglx.weights.verify import verify_weights
from sglx_core.errors import SglxError
from sglx_core.profile import load_profile
from sglx_core.report import Finding

_CONVERTED: dict[str, Path] = {}


def converted(arch: str = "cpu") -> tuple[Path, Path]:
    """(source, a fresh copy of its conversion for `arch`) — the copy may be damaged freely."""
    src = demo_checkpoint("llama", "float32", "40KB")
    if arch not in _CONVERTED:
        _CONVERTED[arch] = scratch("converted") / arch
        convert_weights(src, _CONVERTED[arch], load_profile(arch))
    copy = scratch("copy") / "model"
    shutil.copytree(_CONVERTED[arch], copy)
    return src, copy


def tensor_location(folder: Path, name: str) -> tuple[Path, int, int]:
    """(shard, absolute offset, nbytes) of tensor `name`."""
    for shard in sorted(folder.glob("*.safetensors")):
        header = header_of(shard)
        if name in header:
            (length,) = struct.unpack("<Q", shard.read_bytes()[:8])
            begin, end = header[name]["data_offsets"]
            return shard, 8 + length + begin, end - begin
    raise AssertionError(name)


def poke(path: Path, offset: int, data: bytes) -> None:
    with path.open("r+b") as handle:
        handle.seek(offset)
        handle.write(data)


def codes(findings: tuple[Finding, ...]) -> set[str]:
    return {f.code for f in findings}


# ------------------------------------------------------------------------------------------
# verify
# ------------------------------------------------------------------------------------------


def test_verify_passes_on_a_fresh_conversion() -> None:
    _, dst = converted()
    result = verify_weights(dst)
    assert result.exit_code == 0 and result.data["ok"]


def test_verify_reports_a_changed_byte() -> None:
    _, dst = converted()
    shard, offset, _ = tensor_location(dst, "model.norm.weight")
    poke(shard, offset, b"\x00\x00\x80\x7f")
    result = verify_weights(dst)
    assert result.exit_code == 1
    assert codes(result.findings) == {"checksum_mismatch"}
    assert shard.name in result.findings[0].message


def test_verify_reports_missing_extra_and_cut_short_files() -> None:
    _, dst = converted()
    shards = sorted(dst.glob("model-*.safetensors"))
    shards[0].unlink()
    shards[1].write_bytes(shards[1].read_bytes()[:-4])
    (dst / "notes.txt").write_text("added later")
    result = verify_weights(dst)
    assert codes(result.findings) == {"missing_file", "size_mismatch", "extra_file"}


def test_verify_reports_a_header_that_disagrees_with_the_manifest() -> None:
    _, dst = converted()
    manifest = json.loads((dst / "sglx-weights.json").read_text())
    record = next(t for t in manifest["tensors"] if t["name"] == "model.norm.weight")
    record["dtype"] = "F16"
    (dst / "sglx-weights.json").write_text(json.dumps(manifest))
    result = verify_weights(dst)
    assert codes(result.findings) == {"tensor_mismatch"}
    assert "model.norm.weight" in result.findings[0].message


def test_verify_without_a_manifest_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    src = demo_checkpoint("qwen2", "float32")
    assert main(["weights", "verify", str(src), "--json"]) == 2
    envelope = json.loads(capsys.readouterr().out)
    assert envelope["errors"][0]["code"] == "no_manifest"


def test_a_garbled_manifest_is_an_error_naming_the_key() -> None:
    _, dst = converted()
    manifest = json.loads((dst / "sglx-weights.json").read_text())
    manifest["files"][0]["sha256"] = "nope"
    (dst / "sglx-weights.json").write_text(json.dumps(manifest))
    with pytest.raises(SglxError, match=r"files\.0\.sha256") as caught:
        verify_weights(dst)
    assert caught.value.code == "corrupt"


def test_manifest_digest_ignores_formatting_and_follows_content() -> None:
    _, dst = converted()
    digest = manifest_digest(dst)
    path = dst / "sglx-weights.json"
    document = json.loads(path.read_text())
    path.write_text(json.dumps(document))  # no indentation
    assert manifest_digest(path) == digest
    document["arch"] = "gfx942"
    path.write_text(json.dumps(document))
    assert manifest_digest(dst) != digest


def test_cli_verify_exits_1_with_findings_in_json(capsys: pytest.CaptureFixture[str]) -> None:
    _, dst = converted()
    (dst / "stray.safetensors").write_bytes(b"")
    assert main(["weights", "verify", str(dst), "--json", "-q"]) == 1
    envelope = json.loads(capsys.readouterr().out)
    assert envelope["status"] == "findings"
    assert [f["code"] for f in envelope["findings"]] == ["extra_file"]


# ------------------------------------------------------------------------------------------
# check
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arch", "narrowest"), [("cpu", "exact"), ("gfx942", "BF16"), ("kunlun", "F16")]
)
def test_check_uses_the_tolerance_of_the_narrowest_dtype(arch: str, narrowest: str) -> None:
    src, dst = converted(arch)
    result = check_weights(src, dst, prompts=("Hello, world!",))
    assert result.exit_code == 0, [f.message for f in result.findings]
    assert result.data["tolerance"] == {
        "narrowest_dtype": narrowest,
        "max_rel_error": LOGIT_TOLERANCE[narrowest],
    }
    (row,) = result.data["logits"]
    assert row["max_rel"] <= LOGIT_TOLERANCE[narrowest]


def test_check_finds_nan_in_dst() -> None:
    src, dst = converted()
    shard, offset, _ = tensor_location(dst, "model.layers.0.mlp.down_proj.weight")
    poke(shard, offset, np.array([np.nan], dtype="<f4").tobytes())
    result = check_weights(src, dst)
    assert result.exit_code == 1
    assert {"non_finite", "non_finite_logits"} <= codes(result.findings)


def test_check_finds_a_tensor_changed_beyond_rounding() -> None:
    src, dst = converted("gfx942")
    shard, offset, nbytes = tensor_location(dst, "model.layers.1.self_attn.o_proj.weight")
    data = np.frombuffer(shard.read_bytes()[offset : offset + nbytes], dtype="<u2")
    poke(shard, offset, data[::-1].tobytes())  # the same values, in the wrong places
    result = check_weights(src, dst)
    assert "tensor_mismatch" in codes(result.findings)
    assert "logits_mismatch" in codes(result.findings)
    assert result.data["tensors"]["worst"] == "model.layers.1.self_attn.o_proj.weight"


def test_check_finds_a_truncated_dst_without_crashing() -> None:
    src, dst = converted()
    shard = sorted(dst.glob("model-*.safetensors"))[0]
    shard.write_bytes(shard.read_bytes()[:-100])
    result = check_weights(src, dst)
    assert result.exit_code == 1
    assert codes(result.findings) == {"truncated"}


def test_check_finds_missing_and_reshaped_tensors() -> None:
    src, dst = converted()
    shard, _, _ = tensor_location(dst, "model.norm.weight")

    def damage(header: dict[str, dict[str, object]]) -> None:
        entry = header.pop("model.norm.weight")
        header["model.norm.other"] = entry

    rewrite_header(shard, damage)
    index = json.loads((dst / "model.safetensors.index.json").read_text())
    index["weight_map"]["model.norm.other"] = index["weight_map"].pop("model.norm.weight")
    (dst / "model.safetensors.index.json").write_text(json.dumps(index))
    result = check_weights(src, dst)
    assert {"missing_tensor", "extra_tensor"} <= codes(result.findings)
    assert any("logits not compared" in line for line in result.lines)


def test_cli_check_prints_tables_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    src, dst = converted("kunlun")
    assert main(["weights", "check", str(src), str(dst), "-q"]) == 0
    out = capsys.readouterr().out
    assert "max rel error" in out and "numbers match within tolerance" in out
    assert main(["weights", "check", str(src), str(dst), "--json", "--prompts", "a b c"]) == 0
    envelope = json.loads(capsys.readouterr().out)
    assert [row["prompt"] for row in envelope["data"]["logits"]] == ["a b c"]


def test_cli_check_tolerance_overrides_the_default(capsys: pytest.CaptureFixture[str]) -> None:
    src, dst = converted("gfx942")
    assert main(["weights", "check", str(src), str(dst), "--tolerance", "1e-9", "--json"]) == 1
    envelope = json.loads(capsys.readouterr().out)
    assert {f["code"] for f in envelope["findings"]} == {"logits_mismatch"}
    assert envelope["data"]["tolerance"]["max_rel_error"] == 1e-9
    assert main(["weights", "check", str(src), str(dst), "--tolerance", "2"]) == 2
