"""Fixtures shared by every test layer."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import child_env, kunlun_vendor
from helpers.cpu_use import CpuUse, phase_of
from helpers.run_shared import build_times, clean_up

from sglx.cli import main

REPO = Path(__file__).resolve().parents[1]
# How busy the cores were in each phase of this process's run (the terminal summary).
CPU_USE = CpuUse()

# The engine fixtures (cpu base, wheelhouse, image and bundle: built once per run), and how
# `make test` orders the run (alone or between xdist workers).
pytest_plugins = ["helpers.engine_fixtures", "helpers.worker_schedule"]

# The Kunlun base carries sglang-kunlun, whose platform sglx's Kunlun platform subclasses.
kunlun_vendor.install()


# The session's temporary folder (pytest_sessionstart), removed at its end.
_PRIVATE_TMP: list[str] = []


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def run_id(testrun_uid: str) -> str:
    """Unique per test run and the same in every xdist worker: names of containers, images
    and networks carry it."""
    return testrun_uid[:10]


def pytest_sessionstart(session: pytest.Session) -> None:
    """Every temporary file of the session goes to a folder of its own, removed when it ends:
    tempfile's (the plugin's records, sglx's scratch folders) and, through TMPDIR, its
    children's (the ZMQ sockets and files a host-run sglang leaves), so a run leaves nothing in
    /tmp. pytest's own folders stay where they were (its base is taken first). The name is
    short: a UNIX socket's path under it must stay within 107 bytes."""
    session.config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
    folder = tempfile.mkdtemp(prefix="sglx-t-", dir="/tmp")
    Path(folder).chmod(0o1777)  # as /tmp: tests run children as other users too
    _PRIVATE_TMP.append(folder)
    os.environ["TMPDIR"] = tempfile.tempdir = folder
    child_env.freeze(session.config)


def pytest_runtest_logstart(nodeid: str, location: tuple[str, int | None, str]) -> None:
    CPU_USE.enter(phase_of(Path(location[0]).parts))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """What the run built once, and when: the shared builds are most of a run's CPU; and how
    busy the cores were in each phase."""
    if hasattr(config, "workerinput"):
        return
    for title, lines in (("built once in this run", build_times(config)),
                         ("cores busy in each phase", _closed_cpu_use())):  # fmt: skip
        if lines:
            terminalreporter.section(title)
            for line in lines:
                terminalreporter.write_line(line)


def _closed_cpu_use() -> list[str]:
    CPU_USE.enter("summary")
    return CPU_USE.lines()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The process that started the run removes what its workers built (run_shared.py), and
    each process its own temporary folder."""
    clean_up(session.config)
    for folder in _PRIVATE_TMP:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(autouse=True)
def _sglang_choices_kept() -> Iterator[None]:
    """A Kunlun platform resolved in one test leaves no attention-backend choice to the next."""
    with kunlun_vendor.sglang_choices_kept():
        yield


@pytest.fixture(autouse=True)
def _private_cache_dir(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Per-user caches (the verified-hash cache of `sglx wheels verify`) go to a folder of the
    test session, never the real ~/.cache/sglx."""
    monkeypatch.setenv("SGLX_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "sglx-cache"))


@pytest.fixture(autouse=True, scope="session")
def _private_jit_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The node-local JIT cache folders install.sh and `sglx bundle install` create (as root)
    go to a folder of the test session, never this machine's /var/cache/sglx/jit. Session
    scope: the module fixtures that install a bundle are set up before any function's."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SGLX_JIT_ROOT", str(tmp_path_factory.getbasetemp() / "sglx-jit"))
        # and the weights store entries they place, never /var/lib/sglx/models
        patch.setenv("SGLX_MODELS_ROOT", str(tmp_path_factory.getbasetemp() / "sglx-models"))
        # and the install records they write, never /var/lib/sglx/bundles
        patch.setenv("SGLX_STATE_DIR", str(tmp_path_factory.getbasetemp() / "sglx-state"))
        yield


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
