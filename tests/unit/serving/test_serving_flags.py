"""sglang's launch_server options as sglx reads them without importing sglang
(sglx_core.serving.flags): the committed table is the installed sglang's own parser, and any
argv reads or is refused with an SglxError, never another exception (Hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglx_core.errors import SglxError
from sglx_core.serving import flags


def test_the_table_is_the_installed_sglangs_own_parser() -> None:
    table = flags.table_of_parser()
    assert table["sglang"] == flags.SGLANG_VERSION
    committed = {name: o.__dict__ for name, o in flags.options().items()}
    live = {
        name: {**o, "choices": tuple(o["choices"]) if o["choices"] else None}
        for name, o in table["options"].items()
    }
    assert committed == live, "run `python -m sglx_core.serving.flags --write`"


@pytest.mark.parametrize(
    ("argv", "values"),
    [
        (["--mem-fraction", "0.45"], {"--mem-fraction-static": "0.45"}),
        (["--tp", "2", "--tp-size=4"], {"--tp-size": "4"}),
        (["--context-length", "128k"], {"--context-length": "128000"}),
        (["--context-length=32Ki"], {"--context-length": "32768"}),
        (
            ["--trust-remote-code", "--dtype", "float32"],
            {"--trust-remote-code": None, "--dtype": "float32"},
        ),
        (["--json-model-override-args", '{"a": 1}'], {"--json-model-override-args": '{"a": 1}'}),
        (["--api-key", "--a b"], {"--api-key": "--a b"}),  # a space: argparse takes a value
    ],
)
def test_flags_read_as_sglang_reads_them(argv: list[str], values: dict[str, str | None]) -> None:
    read = flags.read_args(argv)
    assert read.values == values
    assert read.argv == argv  # handed on as given: what the server's cmdline holds


def test_sglx_serves_own_flags_only_in_option_position() -> None:
    own = ("--dry-run", "--json")
    read = flags.read_args(["--dry-run", "--tp", "2"], own=own)
    assert read.own == {"--dry-run"} and read.argv == ["--tp", "2"]
    with pytest.raises(SglxError, match="--api-key expects a value"):
        flags.read_args(["--api-key", "--dry-run"], own=own)


@settings(max_examples=400, deadline=None, database=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "--tp",
                "--mem-fraction",
                "--context-length",
                "--dtype",
                "--pp",
                "--dry-run",
                "--",
                "-",
                "--x=",
                "--page-size=1",
                "--lora-paths",
                "--tp-size=",
                "--json",
            ]
        )
        | st.text(max_size=12),
        max_size=8,
    )
)
def test_any_argv_reads_or_is_refused_cleanly(argv: list[str]) -> None:
    try:
        read = flags.read_args(argv, own=("--dry-run",))
    except SglxError as error:
        assert error.hint and error.code == "usage"
        return
    for flag in read.values:
        assert flag in flags.options()
