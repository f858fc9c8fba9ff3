"""`sglx scan` on the command line: usage errors, output shape, parallel reading."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_scan_support import ElfFactory, needs_gcc

from sglx.cli import main
from sglx.scan import inventory

CliJson = Callable[..., tuple[int, dict[str, Any]]]
Cli = Callable[..., tuple[int, str, str]]


def test_scan_help_names_the_targets(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["scan", "--help"])
    assert stopped.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--image", "--archive", "--bundle", "--root", "--arch", "--jobs", "--json"):
        assert flag in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "give exactly one of PATH, --image REF, --archive FILE or --bundle DIR"),
        (
            ["{tmp}", "--image", "x:1"],
            "give exactly one of PATH, --image REF, --archive FILE or --bundle DIR",
        ),
        (["{tmp}/nope"], "does not exist"),
        (["{tmp}", "{tmp}"], "several PATHs need --root"),
        (["--root", "{tmp}/inner", "{tmp}"], "is not inside --root"),
        (["--root", "{tmp}"], "--root goes with PATHs"),
        (["{tmp}", "--jobs", "0"], "argument --jobs: 0 is out of range: give 1 to 64"),
    ],
)
def test_usage_errors_exit_2_with_a_message(
    argv: list[str], message: str, tmp_path: Path, sglx_json: CliJson
) -> None:
    (tmp_path / "inner").mkdir()
    code, envelope = sglx_json("scan", *(a.replace("{tmp}", str(tmp_path)) for a in argv))
    assert code == 2
    [error] = envelope["errors"]
    assert error["code"] == "usage"
    assert message in error["message"]


def test_unknown_arch_is_a_usage_error(tmp_path: Path, sglx_json: CliJson) -> None:
    code, envelope = sglx_json("scan", str(tmp_path), "--arch", "nope")
    assert code == 2
    assert envelope["errors"][0]["code"] == "unknown_arch"


def test_a_tree_without_elf_files_is_clean(tmp_path: Path, sglx: Cli) -> None:
    (tmp_path / "README").write_text("hello\n")
    code, out, _ = sglx("scan", str(tmp_path), "-q")
    assert code == 0
    assert out.startswith("summary\n")
    assert "unresolved dependencies by file" not in out


@needs_gcc
def test_long_lists_are_cut_for_people_and_whole_in_json(
    tmp_path: Path, sglx: Cli, sglx_json: CliJson
) -> None:
    cc = ElfFactory(tmp_path / "build")
    gone = cc.lib(tmp_path / "build/libgone.so.1", libc=False)
    first = cc.lib(tmp_path / "tree/lib/libuser00.so", needs=[gone], libc=False)
    for i in range(1, 25):
        shutil.copy(first, tmp_path / f"tree/lib/libuser{i:02}.so")
    code, out, _ = sglx("scan", str(tmp_path / "tree"), "-q")
    assert code == 1
    assert "... and 5 more unresolved dependencies (--json lists all)" in out
    assert out.count("finding [unresolved]") == 1  # one finding per missing name
    assert "(and by 24 more files)" in out
    code, envelope = sglx_json("scan", str(tmp_path / "tree"))
    assert len(envelope["data"]["scans"][0]["unresolved"]) == 25
    assert envelope["data"]["summary"]["unresolved"] == 25


@needs_gcc
def test_parallel_reading_finds_the_same_as_one_process(
    tmp_path: Path, sglx_json: CliJson, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inventory, "POOL_MIN_FILES", 1000)  # use the pool on a small tree
    cc = ElfFactory(tmp_path / "build")
    tree = tmp_path / "tree"
    dep = cc.lib(tree / "lib/libdep.so.1")
    cc.lib(tree / "lib/libtop.so", needs=[dep], runpath="$ORIGIN")
    for i in range(3000):  # files that must be opened to know they are not ELF
        (tree / "data" / f"{i // 500}").mkdir(parents=True, exist_ok=True)
        (tree / "data" / f"{i // 500}" / f"f{i}.dat").write_text("x")
    (tree / "src").mkdir()
    for i in range(500):  # files the suffix filter never opens
        (tree / "src" / f"m{i}.py").write_text("x = 1\n")
    runs = [sglx_json("scan", "--root", "/", str(tree), "--jobs", jobs) for jobs in ("1", "2")]
    scans = [envelope["data"]["scans"][0] for _, envelope in runs]
    for scan in scans:
        scan.pop("seconds")
    assert scans[0] == scans[1]
    assert scans[0]["files"] == 3502
    assert scans[0]["elf_files"] == 2
    assert scans[0]["dependencies"]["unresolved"] == 0
