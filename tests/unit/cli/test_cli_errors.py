"""No input makes `sglx` print a Python traceback: usage errors (also as a --json envelope),
missing optional libraries, interrupts, OS errors and bugs are one message and exit 2."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.signals import default_sigint
from packaging.requirements import Requirement

from sglx.optional_deps import OPTIONAL_MODULES

CliRunner = Callable[..., tuple[int, str, str]]
REPO = Path(__file__).resolve().parents[3]


def error_of(out: str) -> dict[str, Any]:
    """The one error of a --json error envelope on stdout (which must hold nothing else)."""
    envelope = json.loads(out)
    assert envelope["status"] == "error"
    assert envelope["exit_code"] == 2
    (error,) = envelope["errors"]
    return dict(error)


# --------------------------------------------------------------------------------------------
# argparse usage errors
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "usage", "words"),
    [
        (["arch", "shw"], "usage: sglx arch", "invalid choice: 'shw'"),
        (["arch", "show"], "usage: sglx arch show", "the following arguments are required: ARCH"),
        (["scan", "--jobs", "many"], "usage: sglx scan", "argument --jobs: 'many' is not a whole"),
        (["nope"], "usage: sglx", "invalid choice: 'nope'"),
        (["arch", "list", "--colour"], "usage: sglx", "unrecognized arguments: --colour"),
    ],
)
def test_a_usage_error_prints_usage_and_the_problem(
    sglx: CliRunner, argv: list[str], usage: str, words: str
) -> None:
    code, out, err = sglx(*argv)
    assert code == 2
    assert out == ""
    assert err.startswith(usage)
    assert words in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "command", "words"),
    [
        (["arch", "shw"], ["arch"], "invalid choice: 'shw'"),
        (["arch", "show"], ["arch", "show"], "the following arguments are required: ARCH"),
        (["wheels", "lock", "--find-links"], ["wheels", "lock"], "expected one argument"),
    ],
)
def test_a_usage_error_with_json_is_an_envelope(
    sglx: CliRunner, argv: list[str], command: list[str], words: str
) -> None:
    code, out, err = sglx(*argv, "--json")
    assert code == 2
    envelope = json.loads(out)
    assert envelope["command"] == command
    error = error_of(out)
    assert error["code"] == "usage"
    assert words in error["message"]
    assert error["hint"] == f"see `{' '.join(['sglx', *command])} --help`"
    assert err == ""


def test_help_still_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    from sglx.cli import main

    with pytest.raises(SystemExit) as stopped:
        main(["wheels", "verify", "--help"])
    assert stopped.value.code == 0
    out = capsys.readouterr().out
    assert "--arch ARCH" in out
    assert "--debug" in out


# --------------------------------------------------------------------------------------------
# --arch comes from one parent parser
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["base", "build"],
        ["base", "ensure"],
        ["weights", "convert", "SRC", "DST"],
        ["wheels", "lock"],
        ["wheels", "fetch"],
        ["wheels", "verify"],
        ["image", "build"],
    ],
)
def test_every_arch_option_defaults_to_the_arch_env(
    argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from sglx.cli import build_parser

    monkeypatch.setenv("ARCH", "gfx942")
    assert build_parser().parse_args(argv).arch == "gfx942"
    assert build_parser().parse_args([*argv, "--arch", "kunlun"]).arch == "kunlun"
    monkeypatch.delenv("ARCH")
    assert build_parser().parse_args(argv).arch == "cpu"


def test_an_arch_from_the_env_is_checked_like_one_given(
    sglx: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ARCH", "../etc")
    code, out, err = sglx("wheels", "verify")
    assert code == 2
    assert out == ""
    assert "invalid arch name '../etc'" in err
    assert "Traceback" not in err


# --------------------------------------------------------------------------------------------
# OS errors nobody caught, and bugs
# --------------------------------------------------------------------------------------------


def test_an_uncaught_os_error_is_one_line_naming_it(sglx: CliRunner, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code, out, err = sglx("wheels", "fetch", "--arch", "cpu", "--dest", str(blocker / "x"), "-q")
    assert code == 2
    assert out == ""
    assert f"sglx: error: NotADirectoryError: [Errno 20] Not a directory: '{blocker}/x'" in err
    assert "--debug (or SGLX_DEBUG=1) shows the traceback" in err
    assert "Traceback" not in err


def _a_bug(*_: object) -> None:
    raise RuntimeError("the list of arches\nis\tbroken")


def test_a_bug_is_one_line_and_says_how_to_see_more(
    sglx: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sglx.arch.list_arches", _a_bug)  # a bug cannot be had on purpose
    monkeypatch.delenv("SGLX_DEBUG", raising=False)
    code, out, err = sglx("arch", "list")
    assert code == 2
    assert out == ""
    assert err.splitlines()[0] == (
        "sglx: error: unexpected RuntimeError: the list of arches is broken"
    )
    assert "this is a bug in sglx; --debug (or SGLX_DEBUG=1) shows the traceback" in err
    assert "Traceback" not in err


def test_a_bug_with_json_is_an_internal_error_envelope(
    sglx: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sglx.arch.list_arches", _a_bug)
    monkeypatch.delenv("SGLX_DEBUG", raising=False)
    code, out, err = sglx("arch", "list", "--json")
    assert code == 2
    error = error_of(out)
    assert error["code"] == "internal_error"
    assert error["message"] == "unexpected RuntimeError: the list of arches is broken"
    assert "Traceback" not in err


@pytest.mark.parametrize("how", ["--debug", "SGLX_DEBUG=1"])
def test_debug_shows_the_traceback_on_stderr_only(
    sglx: CliRunner, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    monkeypatch.setattr("sglx.arch.list_arches", _a_bug)
    argv = ["arch", "list", "--json"]
    if how == "--debug":
        argv.append("--debug")
    else:
        monkeypatch.setenv("SGLX_DEBUG", "1")
    code, out, err = sglx(*argv)
    assert code == 2
    assert error_of(out)["code"] == "internal_error"  # stdout is still one envelope
    assert "Traceback (most recent call last)" in err
    assert "RuntimeError: the list of arches" in err


# --------------------------------------------------------------------------------------------
# Interrupts and closed pipes (real processes, real signals)
# --------------------------------------------------------------------------------------------


def _sglx_process(argv: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "sglx.cli", *argv],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )


@pytest.mark.parametrize("as_json", [False, True])
def test_ctrl_c_is_interrupted_exit_2(as_json: bool) -> None:
    """`base ensure` waits for an engine that accepts and never answers; SIGINT stops it."""
    with socket.socket() as engine:
        engine.bind(("127.0.0.1", 0))
        engine.listen(1)
        port = engine.getsockname()[1]
        argv = ["base", "ensure", "--arch", "gfx942", *(["--json"] if as_json else [])]
        proc = _sglx_process(argv, {"DOCKER_HOST": f"tcp://127.0.0.1:{port}"})
        try:
            engine.settimeout(60)
            connection, _ = engine.accept()  # sglx is now waiting for the engine's answer
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=60)
            connection.close()
        finally:
            proc.kill()
            proc.wait()
    assert proc.returncode == 2
    assert "Traceback" not in err
    if as_json:
        error = error_of(out)
        assert error["code"] == "interrupted"
        assert error["message"] == "interrupted"
    else:
        assert err == "sglx: interrupted\n"


def test_a_closed_stdout_is_not_a_traceback() -> None:
    proc = _sglx_process(["arch", "schema"], {})
    assert proc.stdout is not None
    proc.stdout.close()  # before sglx writes: its write meets a closed pipe
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 2
    assert "Traceback" not in err
    assert "BrokenPipeError" not in err


# --------------------------------------------------------------------------------------------
# Missing optional libraries: hidden from a real interpreter by a meta-path finder
# --------------------------------------------------------------------------------------------

HIDE_AND_RUN = textwrap.dedent(
    """
    import sys

    class Hide:
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] == {hidden!r}:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None

    sys.meta_path.insert(0, Hide())
    from sglx.cli import main
    sys.exit(main(sys.argv[1:]))
    """
)


def run_without(module: str, argv: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    proc = subprocess.run(
        [sys.executable, "-c", HIDE_AND_RUN.format(hidden=module), *argv],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.parametrize(
    ("module", "argv", "distribution"),
    [
        ("elftools", ["scan", "{tmp}"], "pyelftools"),
        ("jinja2", ["image", "render", "--check"], "jinja2"),
        ("docker", ["base", "ensure", "--arch", "gfx942"], "docker"),
    ],
)
def test_a_missing_host_library_names_the_extra(
    module: str, argv: list[str], distribution: str, tmp_path: Path
) -> None:
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    command = " ".join(a for a in argv[:2] if not a.startswith(("-", "/")))
    code, out, err = run_without(module, argv, {})
    assert code == 2
    assert out == ""
    assert (
        f"sglx: error: sglx {command} needs {distribution}, which is in the [host] extra: "
        "pip install 'sglx[host]'"
    ) in err
    assert "Traceback" not in err
    assert "ModuleNotFoundError" not in err


def test_a_missing_host_library_with_json_is_an_envelope(tmp_path: Path) -> None:
    code, out, err = run_without("elftools", ["scan", str(tmp_path), "--json"], {})
    assert code == 2
    error = error_of(out)
    assert error["code"] == "missing_dependency"
    assert error["message"] == (
        "sglx scan needs pyelftools, which is in the [host] extra: pip install 'sglx[host]'"
    )
    assert "Traceback" not in err


def test_a_missing_library_outside_the_extras_is_named(tmp_path: Path) -> None:
    code, _, err = run_without("tokenizers", ["model", "demo", str(tmp_path / "m")], {})
    assert code == 2
    assert "sglx model demo needs the Python module 'tokenizers', which is not installed" in err
    assert "Traceback" not in err
    assert not (tmp_path / "m").exists()


def test_the_module_table_covers_the_host_extra_exactly() -> None:
    """extras.OPTIONAL_MODULES is the [host] extra of pyproject.toml, import name by name."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    host = {Requirement(r).name.lower() for r in project["optional-dependencies"]["host"]}
    assert {dist.lower() for dist, extra in OPTIONAL_MODULES.values() if extra == "host"} == host
