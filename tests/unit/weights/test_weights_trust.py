"""How far `sglx weights` and `bundle install --weights-dir` trust what they are given (issue 21).

A checkpoint, a converted model and a bundle come from outside. Each case runs the real CLI
and asserts the exit code, the error's code and words, and that nothing was written, copied or
deleted outside the target: a link out of a checkpoint is never followed into DST, a FIFO never
hangs a reader, a huge manifest is not read whole, and a bundle's weights name never makes
install remove the weights folder it installs into.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers.bundles import hand_bundle
from weights_helpers import listing, save_tensors, scratch

from sglx_core.weights_manifest import MANIFEST_NAME, MAX_MANIFEST_BYTES

Cli = Callable[..., tuple[int, str, str]]
CliJson = Callable[..., tuple[int, dict[str, Any]]]
CONFIG = {"model_type": "llama"}
SECRET = b"root:$6$not-a-real-hash:19000:0:99999:7:::\n"


def _checkpoint(name: str) -> Path:
    tensors = {"layers.0.weight": torch.randn(8, 16, generator=torch.Generator().manual_seed(1))}
    return save_tensors(scratch(name) / "src", tensors, config=CONFIG)


def _host_file() -> Path:
    """A file outside any checkpoint, standing in for /etc/shadow."""
    path = scratch("host") / "shadow"
    path.write_bytes(SECRET)
    path.chmod(0o600)
    return path


def _error(envelope: dict[str, Any]) -> dict[str, Any]:
    [error] = envelope["errors"]
    assert envelope["exit_code"] == 2
    found: dict[str, Any] = error
    return found


def _convert(sglx_json: CliJson, src: Path) -> tuple[int, dict[str, Any], Path]:
    parent = scratch("out")
    code, envelope = sglx_json("weights", "convert", str(src), str(parent / "dst"), "-q")
    return code, envelope, parent


def _tree(folder: Path) -> dict[str, bytes | None]:
    """Every path under `folder` with its bytes (None for folders): what must stay as it was."""
    return {
        str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(folder.rglob("*"))
    }


# -- item 6: links and special files in a checkpoint -----------------------------------------


@pytest.mark.parametrize(
    "name", ["tokenizer_config.json", "config.json", "model.safetensors"], ids=str
)
def test_a_link_that_leaves_the_checkpoint_is_refused_and_nothing_is_copied(
    name: str, sglx_json: CliJson
) -> None:
    src = _checkpoint("link-out")
    host = _host_file()
    if name != "tokenizer_config.json":  # a real file of that name moves out of the folder
        host.write_bytes((src / name).read_bytes())
        (src / name).unlink()
    (src / name).symlink_to(host)

    code, envelope, parent = _convert(sglx_json, src)

    assert code == 2
    error = _error(envelope)
    assert error["code"] == "link_outside"
    assert error["path"] == str(src / name)
    assert f"{src / name}: a link to {host}, outside the checkpoint folder" in error["message"]
    assert "put the file itself in the checkpoint folder" in error["hint"]
    assert listing(parent) == []  # no DST, no staging folder: nothing was copied
    assert host.stat().st_mode & 0o777 == 0o600


def _fifo(path: Path) -> Iterator[str]:
    os.mkfifo(path)
    yield "a FIFO"


def _device(path: Path) -> Iterator[str]:
    try:
        os.mknod(path, stat.S_IFCHR | 0o644, os.makedev(1, 5))  # what /dev/zero is
    except PermissionError:
        pytest.skip("mknod needs root")
    yield "a character device"


def _socket(path: Path) -> Iterator[str]:
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(path))
        yield "a socket"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("make", [_fifo, _device, _socket], ids=["fifo", "device", "socket"])
@pytest.mark.parametrize("name", ["tokenizer.json", "model.safetensors"])
def test_fifos_devices_and_sockets_in_a_checkpoint_are_refused_naming_them(
    make: Callable[[Path], Iterator[str]], name: str, sglx_json: CliJson
) -> None:
    src = _checkpoint("special")
    (src / name).unlink(missing_ok=True)
    for kind in make(src / name):
        code, envelope, parent = _convert(sglx_json, src)

        assert code == 2
        error = _error(envelope)
        assert error["code"] == "not_regular"
        assert (
            f"{src / name}: the checkpoint file is {kind}, not a regular file" in error["message"]
        )
        assert listing(parent) == []


def test_a_link_to_another_file_of_the_checkpoint_is_followed(sglx: Cli) -> None:
    """Decided: a link that stays inside the checkpoint is fine (exporters and copies make
    them); DST gets a regular file with the target's bytes."""
    src = _checkpoint("link-in")
    (src / "shared").mkdir()
    (src / "shared" / "tokenizer.json").write_text('{"version": "1.0"}')
    (src / "tokenizer.json").symlink_to("shared/tokenizer.json")
    dst = scratch("out") / "dst"

    code, out, err = sglx("weights", "convert", str(src), str(dst), "-q")

    assert code == 0, err
    assert not (dst / "tokenizer.json").is_symlink()
    assert (dst / "tokenizer.json").read_text() == '{"version": "1.0"}'
    assert "skipped shared: a folder (sub-folders are not carried)" in out


def _hf_snapshot() -> tuple[Path, Path]:
    """A Hugging Face cache repository: files in blobs/, the snapshot made of links to them."""
    source = _checkpoint("hf-source")
    repo = scratch("hub") / "models--org--tiny"
    (repo / "blobs").mkdir(parents=True)
    snapshot = repo / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    for path in source.iterdir():
        blob = hashlib.sha256(path.read_bytes()).hexdigest()
        (repo / "blobs" / blob).write_bytes(path.read_bytes())
        (snapshot / path.name).symlink_to(f"../../blobs/{blob}")
    return repo, snapshot


def test_a_hugging_face_cache_snapshot_still_converts(sglx: Cli) -> None:
    _, snapshot = _hf_snapshot()
    dst = scratch("out") / "dst"

    code, _, err = sglx("weights", "convert", str(snapshot), str(dst), "-q")

    assert code == 0, err
    assert listing(dst) == ["config.json", "model.safetensors", MANIFEST_NAME]


def test_a_snapshot_link_past_the_cache_blobs_is_refused(sglx_json: CliJson) -> None:
    repo, snapshot = _hf_snapshot()
    host = _host_file()
    (snapshot / "tokenizer_config.json").symlink_to(host)
    (repo / "blobs" / "escape").symlink_to(host)  # via a link in blobs/: resolved, so refused
    (snapshot / "special_tokens_map.json").symlink_to("../../blobs/escape")

    code, envelope, parent = _convert(sglx_json, snapshot)

    assert code == 2
    error = _error(envelope)
    assert error["code"] == "link_outside"
    assert f"a link to {host}, outside the checkpoint folder" in error["message"]
    assert listing(parent) == []


# -- item 11: `weights verify` never opens a FIFO ---------------------------------------------


def _converted(sglx: Cli) -> Path:
    dst = scratch("converted") / "dst"
    code, _, err = sglx("weights", "convert", str(_checkpoint("verify")), str(dst), "-q")
    assert code == 0, err
    return dst


@pytest.mark.timeout(60)
def test_verify_does_not_open_a_fifo_the_manifest_names_only_as_a_tensor_file(
    sglx: Cli, sglx_json: CliJson
) -> None:
    dst = _converted(sglx)
    manifest = json.loads((dst / MANIFEST_NAME).read_text())
    manifest["tensors"].append(
        {"name": "x", "file": "extra.safetensors", "dtype": "F32", "shape": [1]}
        | {"source_dtype": "F32"}
    )
    (dst / MANIFEST_NAME).write_text(json.dumps(manifest))
    os.mkfifo(dst / "extra.safetensors")

    code, envelope = sglx_json("weights", "verify", str(dst), "-q")

    assert code == 1
    findings = {f["code"]: f for f in envelope["findings"]}
    assert set(findings) == {"tensor_file_unlisted", "extra_file"}
    assert (
        "the manifest puts 1 tensor(s) in extra.safetensors, which its file list does not name"
        in findings["tensor_file_unlisted"]["message"]
    )


@pytest.mark.timeout(60)
def test_verify_reports_a_listed_file_replaced_by_a_fifo(sglx: Cli, sglx_json: CliJson) -> None:
    dst = _converted(sglx)
    (dst / "model.safetensors").unlink()
    os.mkfifo(dst / "model.safetensors")

    code, envelope = sglx_json("weights", "verify", str(dst), "-q")

    assert code == 1
    [finding] = envelope["findings"]
    assert finding["code"] == "not_regular"
    assert finding["message"] == (
        f"{dst / 'model.safetensors'}: the weights file is a FIFO, not a regular file"
    )
    assert "re-copy the converted model" in finding["hint"]


# -- item 12: a bounded sglx-weights.json -----------------------------------------------------


def test_a_huge_sparse_manifest_is_refused_without_reading_it_whole(
    sglx: Cli, sglx_json: CliJson
) -> None:
    import tracemalloc

    dst = _converted(sglx)
    with (dst / MANIFEST_NAME).open("r+b") as handle:
        handle.truncate(1 << 30)  # 1 GiB, sparse: costs no disk

    tracemalloc.start()
    try:
        code, envelope = sglx_json("weights", "verify", str(dst), "-q")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert code == 2
    error = _error(envelope)
    assert error["code"] == "too_large"
    assert f"{dst / MANIFEST_NAME}: the weights manifest is larger than 256 MiB" in error["message"]
    assert peak < MAX_MANIFEST_BYTES + (64 << 20)  # the bound, not the file


def test_a_manifest_repeating_a_key_is_refused(sglx: Cli, sglx_json: CliJson) -> None:
    dst = _converted(sglx)
    text = (dst / MANIFEST_NAME).read_text()
    (dst / MANIFEST_NAME).write_text(text.replace('"arch": "cpu"', '"arch": "cpu", "arch": "x"'))

    code, envelope = sglx_json("weights", "verify", str(dst), "-q")

    assert code == 2
    assert "the weights manifest repeats the key 'arch'" in _error(envelope)["message"]


# -- item 5: a bundle's weights name never reaches outside --weights-dir ----------------------


def _weights_bundle(name: str) -> Path:
    """A bundle (no engine needed) carrying weights/demo beside its image, whose bundle.json
    says weights.name is `name`; SHA256SUMS matches it, so only the name is wrong."""
    from sglx.bundle.manifest import BundleManifest, render_sums, sha256_bytes

    root = scratch("bundle")
    archive = root / "image.tar"
    archive.write_bytes(os.urandom(4096))
    weights = {"weights/demo/sglx-weights.json": b"{}\n", "weights/demo/model.safetensors": b"w"}
    folder = hand_bundle(root / "b", archive, weights, chunk_size=1024)
    document = json.loads((folder / "bundle.json").read_text())
    for entry in document["files"]:
        if entry["path"].startswith("weights/"):
            entry["kind"] = "weights"
    document["weights"] = {
        "name": name,
        "path": "weights/demo",
        "digest": "sha256:" + "1" * 64,
        "size": sum(len(data) for data in weights.values()),
    }
    raw = (json.dumps(document, indent=2, sort_keys=True) + "\n").encode()
    (folder / "bundle.json").write_bytes(raw)
    files = BundleManifest.model_validate_json(json.dumps({**document, "weights": None}))
    (folder / "SHA256SUMS").write_text(render_sums(files, sha256_bytes(raw), None))
    return folder


def _weights_dir() -> Path:
    """A weights folder already holding another model, which install must leave alone."""
    folder = scratch("weights-dir") / "models"
    (folder / "other-model").mkdir(parents=True)
    (folder / "other-model" / "model.safetensors").write_bytes(b"another model's weights")
    return folder


def _install(
    sglx_json: CliJson, bundle: Path, weights_dir: Path, *, refused_early: bool
) -> tuple[int, dict[str, Any]]:
    state = scratch("state") / "installs"
    args = ("--state", str(state), "--weights-dir", str(weights_dir), "-q")
    code, envelope = sglx_json("bundle", "install", str(bundle), *args)
    if refused_early:  # before the install record was written, or anything else
        assert not state.exists()
    return code, envelope


@pytest.mark.parametrize("name", [".", ".."])
def test_a_dot_weights_name_is_refused_by_the_manifest_and_nothing_is_removed(
    name: str, sglx_json: CliJson
) -> None:
    weights_dir = _weights_dir()
    before = _tree(weights_dir.parent)

    code, envelope = _install(sglx_json, _weights_bundle(name), weights_dir, refused_early=False)

    assert code == 1
    [finding] = envelope["findings"]
    assert finding["code"] == "bundle_manifest"
    assert "weights.name" in finding["message"]
    assert envelope["data"]["installed"] is False
    assert _tree(weights_dir.parent) == before


@pytest.mark.parametrize("name", [".", ".."])
def test_install_itself_refuses_a_weights_name_that_is_not_one_plain_folder(
    name: str, sglx_json: CliJson, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check at the place that renames and removes holds even if a manifest reader let
    the name through (the schema is bypassed here)."""
    from sglx.bundle import install
    from sglx.bundle.manifest import BundleManifest

    real_parse = install.parse

    def lax_parse(raw: bytes, where: str) -> BundleManifest:
        manifest = real_parse(raw.replace(f'"name": "{name}"'.encode(), b'"name": "demo"'), where)
        assert manifest.weights is not None
        record = manifest.weights.model_copy(update={"name": name})
        return manifest.model_copy(update={"weights": record})

    weights_dir = _weights_dir()
    before = _tree(weights_dir.parent)
    bundle = _weights_bundle(name)
    monkeypatch.setattr(install, "parse", lax_parse)

    code, envelope = _install(sglx_json, bundle, weights_dir, refused_early=True)

    assert code == 2
    error = _error(envelope)
    assert error["code"] == "bundle_manifest"
    assert (
        f"weights.name {name!r} does not name a folder inside the weights folder"
        in error["message"]
    )
    assert "(nothing was written)" in error["message"]
    assert "weights.name must be one plain folder name" in error["hint"]
    assert _tree(weights_dir.parent) == before


def test_a_weights_name_that_is_a_link_out_of_the_weights_dir_is_refused(
    sglx_json: CliJson,
) -> None:
    weights_dir = _weights_dir()
    elsewhere = scratch("elsewhere")
    (elsewhere / "keep").write_text("not a model")
    (weights_dir / "demo").symlink_to(elsewhere)
    before = _tree(elsewhere)

    code, envelope = _install(sglx_json, _weights_bundle("demo"), weights_dir, refused_early=True)

    assert code == 2
    error = _error(envelope)
    assert f"installing would replace {elsewhere}" in error["message"]
    assert (weights_dir / "demo").is_symlink()
    assert _tree(elsewhere) == before
