"""Numbers on a command line (sglx_core.arg_types): every entry point that takes one refuses
nan, inf and out-of-range values with argparse's usage error (exit 2) naming the flag, where
argparse's `float` would take them (a timeout of nan never times out)."""

from __future__ import annotations

import pytest

# (entry point's main, its other arguments, the flag, a bad value)
GATE = ["--url", "http://127.0.0.1:1"]


def _mains() -> dict[str, tuple[object, list[str]]]:
    from sglx_runtime import gate_tick, golden_replay, speed_gate

    return {
        "gate_tick": (gate_tick.main, GATE),
        "golden_replay": (golden_replay.main, GATE),
        "speed_gate": (speed_gate.main, [*GATE, "--host", "h", "--fleet", "f"]),
    }


@pytest.mark.parametrize(
    ("entry", "flag", "value"),
    [
        ("gate_tick", "--timeout", "nan"),
        ("gate_tick", "--speed-timeout", "0"),
        ("gate_tick", "--speed-timeout", "inf"),
        ("gate_tick", "--memory-max-bytes", "-1"),
        ("golden_replay", "--timeout", "-1"),
        ("golden_replay", "--max-abs", "nan"),
        ("speed_gate", "--timeout", "0"),
        ("speed_gate", "--fraction", "1.5"),
        ("speed_gate", "--fraction", "nan"),
    ],
)
def test_a_number_out_of_range_is_a_usage_error_naming_the_flag(
    entry: str, flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    main, argv = _mains()[entry]
    with pytest.raises(SystemExit) as exited:
        main([*argv, flag, value])  # type: ignore[operator]
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"{flag} must be" in err and repr(value) in err and "Traceback" not in err, err


@pytest.mark.parametrize(
    ("kind", "good", "bad"),
    [
        ("positive", ["1", "0.5", "1e3"], ["0", "-1", "nan", "inf", "-inf", "x", "", "1e400"]),
        ("non_negative", ["0", "2.5"], ["-0.1", "nan", "inf", "x"]),
        ("fraction", ["1", "0.5"], ["0", "1.01", "nan", "x"]),
        ("finite", ["-1", "0", "2.5"], ["nan", "inf", "-inf", "x", "1e400"]),
    ],
)
def test_each_type_takes_the_finite_values_in_its_range(
    kind: str, good: list[str], bad: list[str]
) -> None:
    import argparse

    from sglx_core import arg_types

    parse = getattr(arg_types, kind)("--x")
    assert [parse(text) for text in good] == [float(text) for text in good]
    for text in bad:
        with pytest.raises(argparse.ArgumentTypeError, match=r"--x must be"):
            parse(text)
