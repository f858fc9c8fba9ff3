"""The sglx_kernels registry: priority order, environment switches, one-time fallback warnings,
the recorder, and an import without Triton. Runs on the CPU in this process, where Triton has
no backend (the interpreter is only on in the op tests' child processes)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
import torch

import sglx_kernels
from sglx_kernels import registry
from sglx_kernels.registry import KernelSelectionError, UnsupportedInput

CPU = torch.device("cpu")
OPS = (
    "fused_add_rms_norm",
    "gelu_and_mul",
    "layer_norm",
    "rms_norm",
    "rotary_embedding",
    "silu_and_mul",
)
TEST_OP = "sglx_test_only_op"


@pytest.fixture(autouse=True)
def clean_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in (registry.ENV_IMPL, registry.ENV_PREFER, registry.ENV_DENY):
        monkeypatch.delenv(name, raising=False)
    registry.reset()
    yield
    registry.set_recorder(None)
    if TEST_OP in registry.ops():
        registry.unregister(TEST_OP)
    registry.reset()


@pytest.fixture
def recorded() -> Iterator[list[tuple[str, str, float | None]]]:
    calls: list[tuple[str, str, float | None]] = []
    registry.set_recorder(lambda op, impl, seconds: calls.append((op, impl, seconds)))
    yield calls


def test_priority_is_vendor_triton_composite_native() -> None:
    assert registry.IMPLEMENTATIONS == ("vendor", "triton", "composite", "native")


def test_every_op_ships_triton_composite_and_native_but_no_vendor() -> None:
    assert registry.ops() == OPS
    for op in OPS:
        assert registry.implementations(op) == ("triton", "composite", "native")


def test_cpu_without_interpreter_falls_back_to_composite_and_says_why() -> None:
    choice = registry.choose("rms_norm", "cpu")
    assert choice.selected == "composite" and not choice.explicit
    assert choice.chain == ("composite", "native")
    reasons = dict(choice.skipped)
    assert reasons["vendor"] == "not registered"
    assert (
        "no backend for cpu tensors" in reasons["triton"]
        and "TRITON_INTERPRET=1" in reasons["triton"]
    )


def test_automatic_fallback_warns_once_per_op_and_device(caplog: pytest.LogCaptureFixture) -> None:
    x, w = torch.randn(2, 8), torch.ones(8)
    with caplog.at_level(logging.WARNING, logger="sglx_kernels"):
        for _ in range(3):
            sglx_kernels.rms_norm(x, w)
        os.environ[registry.ENV_DENY] = (
            "silu_and_mul=vendor"  # a new env value: new choice, no new warning
        )
        try:
            sglx_kernels.rms_norm(x, w)
        finally:
            del os.environ[registry.ENV_DENY]
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == [warnings[0]], f"expected exactly one warning, got {warnings}"
    assert "rms_norm on cpu falls back from triton to composite" in warnings[0]


def test_the_recorder_learns_which_implementation_ran(
    recorded: list[tuple[str, str, float | None]],
) -> None:
    sglx_kernels.silu_and_mul(torch.randn(3, 8))
    sglx_kernels.rms_norm(torch.randn(3, 8), torch.ones(8))
    assert recorded == [("silu_and_mul", "composite", None), ("rms_norm", "composite", None)]


def test_timed_recorder_reports_seconds() -> None:
    seen: list[float | None] = []
    registry.set_recorder(lambda _op, _impl, seconds: seen.append(seconds), timed=True)
    sglx_kernels.gelu_and_mul(torch.randn(3, 8))
    assert len(seen) == 1 and isinstance(seen[0], float) and seen[0] >= 0.0


def test_removing_the_recorder_stops_recording(
    recorded: list[tuple[str, str, float | None]],
) -> None:
    registry.set_recorder(None)
    sglx_kernels.silu_and_mul(torch.randn(3, 8))
    assert recorded == []


def test_impl_switch_forces_every_op(
    monkeypatch: pytest.MonkeyPatch, recorded: list[tuple[str, str, float | None]]
) -> None:
    monkeypatch.setenv("SGLX_KERNELS_IMPL", "native")
    for op in OPS:
        choice = registry.choose(op, CPU)
        assert choice.chain == ("native",) and choice.explicit
    sglx_kernels.silu_and_mul(torch.randn(3, 8))
    assert recorded == [("silu_and_mul", "native", None)]


def test_prefer_names_ops_and_overrides_the_global_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLX_KERNELS_IMPL", "composite")
    monkeypatch.setenv("SGLX_KERNELS_PREFER", "rms_norm=native, *=native ,silu_and_mul=composite")
    assert registry.select("rms_norm", CPU) == "native"
    assert registry.select("silu_and_mul", CPU) == "composite"
    assert registry.select("gelu_and_mul", CPU) == "native"  # from *=native


def test_auto_means_automatic(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLX_KERNELS_IMPL", "auto")
    assert registry.select("rms_norm", CPU) == "composite"


def test_deny_moves_on_to_the_next_implementation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLX_KERNELS_DENY", "rms_norm=composite,*=triton")
    choice = registry.choose("rms_norm", CPU)
    assert choice.chain == ("native",)
    assert ("composite", "denied by SGLX_KERNELS_DENY") in choice.skipped
    assert registry.select("silu_and_mul", CPU) == "composite"


def test_denying_everything_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLX_KERNELS_DENY", "rms_norm=composite,rms_norm=native")
    with pytest.raises(KernelSelectionError, match="no implementation of rms_norm can run on cpu"):
        registry.select("rms_norm", CPU)


def test_explicit_triton_on_cpu_raises_instead_of_falling_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SGLX_KERNELS_PREFER", "rms_norm=triton")
    with pytest.raises(KernelSelectionError) as caught:
        sglx_kernels.rms_norm(torch.randn(2, 8), torch.ones(8))
    message = str(caught.value)
    assert "SGLX_KERNELS_PREFER=rms_norm=triton asks for 'triton' for rms_norm" in message
    assert "cannot run on cpu" in message and "composite, native" in message


def test_explicit_vendor_raises_since_none_is_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLX_KERNELS_IMPL", "vendor")
    with pytest.raises(KernelSelectionError, match="rms_norm has no 'vendor' implementation"):
        registry.select("rms_norm", CPU)


def test_prefer_and_deny_of_the_same_implementation_conflict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SGLX_KERNELS_PREFER", "rms_norm=native")
    monkeypatch.setenv("SGLX_KERNELS_DENY", "*=native")
    with pytest.raises(KernelSelectionError, match="SGLX_KERNELS_DENY=\\*=native denies it"):
        registry.select("rms_norm", CPU)


@pytest.mark.parametrize(
    ("variable", "value", "match"),
    [
        ("SGLX_KERNELS_IMPL", "fast", "SGLX_KERNELS_IMPL='fast': unknown implementation"),
        ("SGLX_KERNELS_PREFER", "rms_norm", "'rms_norm' is not <op>=<implementation>"),
        ("SGLX_KERNELS_PREFER", "rmsnorm=triton", "unknown op 'rmsnorm'"),
        ("SGLX_KERNELS_DENY", "rms_norm=cuda", "unknown implementation 'cuda' in 'rms_norm=cuda'"),
    ],
)
def test_malformed_switches_raise_value_error_quoting_them(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, match: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValueError, match=match):
        registry.select("rms_norm", CPU)


def _register_test_op(native_calls: list[str]) -> None:
    def triton_like(x: torch.Tensor) -> torch.Tensor:
        raise UnsupportedInput(f"{TEST_OP}: rows of {x.shape[-1]} are too wide")

    def native(x: torch.Tensor) -> torch.Tensor:
        native_calls.append("native")
        return x + 1

    registry.register(TEST_OP, "triton", triton_like, unavailable_reason=lambda device: None)
    registry.register(TEST_OP, "native", native)


def test_unsupported_input_falls_through_once_logged(
    caplog: pytest.LogCaptureFixture, recorded: list[tuple[str, str, float | None]]
) -> None:
    native_calls: list[str] = []
    _register_test_op(native_calls)
    with caplog.at_level(logging.WARNING, logger="sglx_kernels"):
        for _ in range(2):
            assert torch.equal(registry.call(TEST_OP, CPU, torch.zeros(2)), torch.ones(2))
    assert native_calls == ["native", "native"]
    assert recorded == [(TEST_OP, "native", None)] * 2
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1 and "falls back from triton to native for this input" in messages[0]


def test_unsupported_input_propagates_from_an_explicit_choice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _register_test_op([])
    monkeypatch.setenv("SGLX_KERNELS_PREFER", f"{TEST_OP}=triton")
    with pytest.raises(UnsupportedInput, match="too wide"):
        registry.call(TEST_OP, CPU, torch.zeros(2))


def test_registration_rejects_unknown_names_and_silent_overwrites() -> None:
    with pytest.raises(ValueError, match="unknown implementation 'cuda'"):
        registry.register(TEST_OP, "cuda", lambda: None)
    with pytest.raises(ValueError, match="lower_snake_case"):
        registry.register("RmsNorm", "native", lambda: None)
    registry.register(TEST_OP, "native", lambda: 1)
    with pytest.raises(ValueError, match="already has a 'native' implementation"):
        registry.register(TEST_OP, "native", lambda: 2)
    registry.register(TEST_OP, "native", lambda: 3, replace=True)
    assert registry.call(TEST_OP, CPU) == 3


def test_a_vendor_implementation_takes_priority_once_registered() -> None:
    registry.register(TEST_OP, "native", lambda: "native")
    registry.register(TEST_OP, "vendor", lambda: "vendor", unavailable_reason=lambda d: None)
    assert registry.select(TEST_OP, CPU) == "vendor"
    assert registry.call(TEST_OP, CPU) == "vendor"


def test_describe_reports_every_op() -> None:
    assert [c.op for c in registry.describe("cpu")] == list(OPS)


def test_package_imports_and_serves_without_triton() -> None:
    """CPU-only torch builds ship no Triton: the package must still import and run."""
    code = (
        "import sys; sys.modules['triton'] = None\n"
        "import torch, sglx_kernels\n"
        "from sglx_kernels import registry\n"
        "choice = registry.choose('rms_norm', 'cpu')\n"
        "print(choice.selected, dict(choice.skipped)['triton'])\n"
        "y = sglx_kernels.rms_norm(torch.ones(2, 4), torch.ones(4))\n"
        "print(tuple(y.shape))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLX_KERNELS_")}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["composite Triton is not installed", "(2, 4)"]
