"""Every worker count of the command line is bounded in one place (issue 21, item 12): `--jobs
300` used to fork 300 workers. Each --jobs and --workers option takes 1 to MAX_WORKERS and
refuses anything else as a usage error (exit 2) that gives the range, before any work."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from sglx.cli import build_parser
from sglx.cli_shared import MAX_WORKERS

CliRunner = Callable[..., tuple[int, str, str]]

COMMANDS = {
    "weights convert": ["weights", "convert", "SRC", "DST", "--jobs"],
    "weights verify": ["weights", "verify", "DST", "--jobs"],
    "scan": ["scan", "PATH", "--jobs"],
    "bundle verify": ["bundle", "verify", "BUNDLE", "--jobs"],
    "bundle install": ["bundle", "install", "BUNDLE", "--jobs"],
    "hosts check": ["hosts", "check", "-i", "INV", "--workers"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("300", f"300 is out of range: give 1 to {MAX_WORKERS}"),
        (str(MAX_WORKERS + 1), f"{MAX_WORKERS + 1} is out of range: give 1 to {MAX_WORKERS}"),
        ("0", f"0 is out of range: give 1 to {MAX_WORKERS}"),
        ("-3", f"-3 is out of range: give 1 to {MAX_WORKERS}"),
        ("many", f"'many' is not a whole number (give 1 to {MAX_WORKERS})"),
    ],
)
def test_a_worker_count_out_of_range_is_a_usage_error(
    sglx: CliRunner, tmp_path: Path, command: str, value: str, words: str
) -> None:
    argv = [str(tmp_path / a) if a.isupper() else a for a in COMMANDS[command]]
    code, out, err = sglx(*argv, value)
    assert code == 2
    option = argv[-1]
    assert f"argument {option}: {words}" in err
    assert "Traceback" not in out + err
    assert list(tmp_path.iterdir()) == []  # refused before anything ran


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_the_ends_of_the_range_are_accepted(command: str) -> None:
    for value in (1, MAX_WORKERS):
        args = build_parser().parse_args([*COMMANDS[command], str(value)])
        assert (args.jobs if "--jobs" in COMMANDS[command] else args.workers) == value
