"""A damaged lock (bundles/locks/<arch>.txt) is an error naming the file and the line and saying
how to regenerate it, whatever is wrong with its header or entries; never a traceback."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.images_copy import copy_images

CliRunner = Callable[..., tuple[int, str, str]]
REGENERATE = "hint: the lock is damaged; regenerate it with `sglx wheels lock --arch cpu`"


@pytest.fixture
def lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """bundles/locks/cpu.txt of a private copy of images/ and the locks."""
    monkeypatch.setenv("SGLX_IMAGES_DIR", str(copy_images(tmp_path)))
    return tmp_path / "bundles" / "locks" / "cpu.txt"


def header_line(lock: Path) -> int:
    lines = lock.read_text().splitlines()
    return next(n for n, line in enumerate(lines, start=1) if line.startswith("# sglx-lock: "))


def set_header(lock: Path, blob: str) -> int:
    """Replace the JSON of the header with `blob`; returns the header's line number."""
    number = header_line(lock)
    lines = lock.read_text().splitlines(keepends=True)
    lines[number - 1] = f"# sglx-lock: {blob}\n"
    lock.write_text("".join(lines))
    return number


def header_of(lock: Path) -> dict[str, Any]:
    line = lock.read_text().splitlines()[header_line(lock) - 1]
    return dict(json.loads(line[len("# sglx-lock: ") :]))


def assert_damaged(sglx: CliRunner, where: str, words: str) -> None:
    """Every command that reads the lock says the same thing."""
    for argv in (["wheels", "verify"], ["wheels", "fetch"]):
        code, out, err = sglx(*argv, "--arch", "cpu", "-q")
        assert code == 2, argv
        assert out == ""
        assert err.startswith(f"sglx: error: {where}: {words}"), err
        assert REGENERATE in err
        assert "Traceback" not in err


@pytest.mark.parametrize(
    ("blob", "words"),
    [
        ('{"arch": "cpu", "inputs": ', "the sglx-lock header is not valid JSON (Expecting value"),
        ("{'arch': 'cpu'}", "the sglx-lock header is not valid JSON (Expecting property name"),
        ("", "the sglx-lock header is not valid JSON"),
        ('["cpu"]', "the sglx-lock header is not a JSON object"),
        ('"cpu"', "the sglx-lock header is not a JSON object"),
        ("[" * 100_000 + "]" * 100_000, "the sglx-lock header is nested too deeply"),
    ],
)
def test_a_header_that_is_not_a_json_object(
    sglx: CliRunner, lock: Path, blob: str, words: str
) -> None:
    number = set_header(lock, blob)
    assert_damaged(sglx, f"{lock}:{number}", words)


def test_the_json_error_names_the_column_in_the_file(sglx: CliRunner, lock: Path) -> None:
    number = set_header(lock, '{"arch": "cpu",, "inputs": "x"}')
    code, _, err = sglx("wheels", "verify", "--arch", "cpu")
    assert code == 2
    # '# sglx-lock: ' is 13 characters; the second comma is at offset 15 of the JSON
    assert f"{lock}:{number}: the sglx-lock header is not valid JSON" in err
    assert "column 29)" in err


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"inputs": None}, "the sglx-lock header's 'inputs' is missing"),
        ({"arch": None}, "the sglx-lock header's 'arch' is missing"),
        ({"arch": 7}, "the sglx-lock header's 'arch' is int, not a string"),
        ({"inputs": ["sha256:0"]}, "the sglx-lock header's 'inputs' is list, not a string"),
    ],
)
def test_a_header_without_its_keys(
    sglx: CliRunner, lock: Path, change: dict[str, Any], words: str
) -> None:
    header = header_of(lock)
    for key, value in change.items():
        if value is None:
            del header[key]
        else:
            header[key] = value
    number = set_header(lock, json.dumps(header))
    assert_damaged(sglx, f"{lock}:{number}", words)


def test_a_lock_without_a_header(sglx: CliRunner, lock: Path) -> None:
    number = header_line(lock)
    lines = lock.read_text().splitlines(keepends=True)
    lock.write_text("".join(lines[: number - 1] + lines[number:]))
    assert_damaged(sglx, str(lock), "no '# sglx-lock:' header line")


def test_an_entry_without_its_hash(sglx: CliRunner, lock: Path) -> None:
    lines = lock.read_text().splitlines(keepends=True)
    entry = next(n for n, line in enumerate(lines) if line.rstrip().endswith("\\"))
    name = lines[entry].split(" ")[0]
    del lines[entry + 1]
    lock.write_text("".join(lines))
    assert_damaged(sglx, f"{lock}:{entry + 1}", f"{name} has no --hash line")


def test_a_lock_cut_short_after_an_entry(sglx: CliRunner, lock: Path) -> None:
    lines = lock.read_text().splitlines(keepends=True)
    last = max(n for n, line in enumerate(lines) if line.rstrip().endswith("\\"))
    lock.write_text("".join(lines[: last + 1]))
    name = lines[last].split(" ")[0]
    assert_damaged(sglx, f"{lock}:{last + 1}", f"{name} has no --hash line")


def test_a_stray_line_is_named(sglx: CliRunner, lock: Path) -> None:
    number = len(lock.read_text().splitlines()) + 1
    with lock.open("a") as handle:
        handle.write("<<<<<<< HEAD\n")
    assert_damaged(sglx, f"{lock}:{number}", "not a line of an sglx lock: '<<<<<<< HEAD'")


def test_a_lock_that_is_not_utf8(sglx: CliRunner, lock: Path) -> None:
    number = len(lock.read_text().splitlines()) + 1
    lock.write_bytes(lock.read_bytes() + b"# \xe9t\xe9\n")
    assert_damaged(sglx, f"{lock}:{number}", "not UTF-8 text (byte 0xe9)")


def test_a_lock_that_is_a_fifo_is_refused_without_blocking(sglx: CliRunner, lock: Path) -> None:
    lock.unlink()
    os.mkfifo(lock)
    assert_damaged(sglx, str(lock), "not a regular file")


def test_a_missing_lock_says_how_to_generate_it(sglx: CliRunner, lock: Path) -> None:
    lock.unlink()
    code, out, err = sglx("wheels", "verify", "--arch", "cpu")
    assert code == 2
    assert out == ""
    assert f"sglx: error: no lock at {lock}" in err
    assert "hint: generate it with `sglx wheels lock --arch cpu`" in err
    assert "Traceback" not in err


def test_a_damaged_header_with_json_is_an_invalid_lock_envelope(
    sglx_json: Callable[..., tuple[int, dict[str, Any]]], lock: Path
) -> None:
    number = set_header(lock, "{")
    code, envelope = sglx_json("wheels", "verify", "--arch", "cpu")
    assert code == 2
    assert envelope["status"] == "error"
    (error,) = envelope["errors"]
    assert error["code"] == "invalid_lock"
    assert error["path"] == str(lock)
    assert error["message"].startswith(f"{lock}:{number}: the sglx-lock header is not valid JSON")
    assert "sglx wheels lock --arch cpu" in error["hint"]
