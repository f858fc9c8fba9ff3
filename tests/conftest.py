"""Fixtures shared by every test layer."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sglx.cli import main

REPO = Path(__file__).resolve().parents[1]

# The engine fixtures (cpu base, wheelhouse, image and bundle: built once per session).
pytest_plugins = ["helpers.engine_fixtures"]


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def run_id() -> str:
    """Unique per test session: names of containers, images and networks carry it."""
    return uuid.uuid4().hex[:10]


@pytest.fixture(autouse=True)
def _private_cache_dir(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Per-user caches (the verified-hash cache of `sglx wheels verify`) go to a folder of the
    test session, never the real ~/.cache/sglx."""
    monkeypatch.setenv("SGLX_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "sglx-cache"))


CliRunner = Callable[..., tuple[int, str, str]]


@pytest.fixture
def sglx(capsys: pytest.CaptureFixture[str]) -> CliRunner:
    """Run the real CLI in-process: returns (exit code, stdout, stderr)."""

    def run(*argv: str) -> tuple[int, str, str]:
        code = main(list(argv))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


@pytest.fixture
def sglx_json(sglx: CliRunner) -> Callable[..., tuple[int, dict[str, Any]]]:
    """Run the CLI with --json: returns (exit code, envelope)."""

    def run(*argv: str) -> tuple[int, dict[str, Any]]:
        code, out, _ = sglx(*argv, "--json")
        return code, json.loads(out)

    return run
