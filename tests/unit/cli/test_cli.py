"""The sglx CLI: help, exit codes and the --json envelope contract."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sglx.cli import main

ENVELOPE_KEYS = {
    "sglx_result_version",
    "command",
    "status",
    "exit_code",
    "data",
    "findings",
    "errors",
}
CliRunner = Callable[..., tuple[int, str, str]]


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["arch"],
        ["arch", "list"],
        ["arch", "show"],
        ["arch", "validate"],
        ["arch", "schema"],
        ["base"],
        ["base", "build"],
    ],
)
def test_every_command_has_useful_help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main([*argv, "--help"])
    assert stopped.value.code == 0
    out = capsys.readouterr().out
    assert "usage: sglx" in out
    assert len(out.splitlines()) > 4


def test_top_level_help_lists_commands_and_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "arch" in out and "base" in out
    assert "exit codes: 0 ok, 1 findings, 2 usage or environment error" in out


def test_arch_list_is_a_table_of_the_five_arches(sglx: CliRunner) -> None:
    code, out, _ = sglx("arch", "list")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["arch", "family", "support"]
    assert [line.split()[0] for line in lines[2:]] == [
        "cpu",
        "gfx1151",
        "gfx942",
        "gfx950",
        "kunlun",
    ]


def test_unknown_arch_lists_the_known_ones_and_exits_2(sglx: CliRunner) -> None:
    code, out, err = sglx("arch", "show", "gfx9")
    assert code == 2
    assert out == ""
    assert "unknown arch 'gfx9'; did you mean 'gfx950'?" in err
    assert "known arches: cpu, gfx1151, gfx942, gfx950, kunlun" in err


def test_unknown_arch_with_json_prints_the_error_envelope(
    sglx_json: Callable[..., tuple[int, dict[str, Any]]],
) -> None:
    code, envelope = sglx_json("arch", "show", "nope")
    assert code == 2
    assert set(envelope) == ENVELOPE_KEYS
    assert envelope["status"] == "error"
    assert envelope["exit_code"] == 2
    assert envelope["command"] == ["arch", "show"]
    (error,) = envelope["errors"]
    assert error["code"] == "unknown_arch"
    assert "known arches" in error["hint"]


def test_show_prints_the_resolved_profile_as_yaml(sglx: CliRunner) -> None:
    code, out, _ = sglx("arch", "show", "gfx942")
    assert code == 0
    assert out.startswith("# gfx942: resolved profile")
    assert "HSA_NO_SCRATCH_RECLAIM: '1'" in out  # merged in from shared/rocm.yaml


def test_validate_all_is_clean(sglx_json: Callable[..., tuple[int, dict[str, Any]]]) -> None:
    code, envelope = sglx_json("arch", "validate")
    assert code == 0
    assert envelope["status"] == "ok"
    assert [p["arch"] for p in envelope["data"]["profiles"]] == [
        "cpu",
        "gfx1151",
        "gfx942",
        "gfx950",
        "kunlun",
    ]


def test_validate_reports_findings_with_exit_1(
    tmp_path: Path, repo: Path, sglx_json: Callable[..., tuple[int, dict[str, Any]]]
) -> None:
    images = tmp_path / "images"
    shutil.copytree(repo / "images", images, ignore=shutil.ignore_patterns("Dockerfile"))
    bad = images / "cpu" / "arch.yaml"
    bad.write_text(bad.read_text().replace("  shm_size: 1g", "  shm_size: 1g\n  nope: 1"))
    code, envelope = sglx_json("arch", "validate", str(images / "cpu"), str(images / "kunlun"))
    assert code == 1
    assert envelope["status"] == "findings"
    assert [p["valid"] for p in envelope["data"]["profiles"]] == [False, True]
    (finding,) = envelope["findings"]
    assert finding["code"] == "invalid_profile"
    assert finding["message"].startswith("container.nope: unknown key 'nope'")
    assert "cpu/arch.yaml:" in finding["path"]


def test_validate_a_missing_path_is_a_usage_error(sglx: CliRunner, tmp_path: Path) -> None:
    code, _, err = sglx("arch", "validate", str(tmp_path / "nowhere"))
    assert code == 2
    assert "no such profile" in err


def test_json_output_is_the_only_thing_on_stdout(sglx: CliRunner) -> None:
    code, out, _ = sglx("arch", "list", "--json")
    assert code == 0
    envelope = json.loads(out)
    assert set(envelope) == ENVELOPE_KEYS
    assert envelope["sglx_result_version"] == "1"
    assert len(envelope["data"]["arches"]) == 5


def test_base_build_refuses_a_vendor_arch_and_says_how_to_get_it(sglx: CliRunner) -> None:
    code, _, err = sglx("base", "build", "--arch", "gfx942")
    assert code == 2
    assert "is not built by sglx" in err
    assert "sglx base load" in err
