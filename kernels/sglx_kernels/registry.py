"""Which implementation runs each op, chosen per device by priority, with environment switches.

Every op has up to four implementations, best first:

- ``vendor``: a platform vendor's kernel (sglang's sgl_kernel, AMD aiter, ...). None ships
  today; `register` is the slot for one.
- ``triton``: the portable Triton kernels in `sglx_kernels.ops`. Needs a Triton backend for the
  tensor's device (CUDA or HIP GPU), or Triton's interpreter (``TRITON_INTERPRET=1``, tests).
- ``composite``: a few torch ops that avoid the reference's extra passes and temporaries.
- ``native``: the torch reference, sglang's ``forward_native`` semantics. Always runs.

Automatic selection takes the first implementation that is registered, not denied and able to
run on the device; skipping one it could otherwise use logs a warning once, because a hot op
that quietly falls back to a slow path halves throughput. An implementation may also raise
`UnsupportedInput` for a call it does not cover (a row too wide for one program); automatic
selection then tries the next one, again with a one-time warning.

Environment switches (read on every call, so a test can flip them; parsed once per value):

- ``SGLX_KERNELS_IMPL=<impl>``: use `<impl>` for every op (``native`` to bisect a numerical
  problem). Unset, empty or ``auto``: automatic selection.
- ``SGLX_KERNELS_PREFER=<op>=<impl>[,<op>=<impl>...]``: use `<impl>` for `<op>`; ``*`` names
  every op. Overrides ``SGLX_KERNELS_IMPL`` for the ops it names.
- ``SGLX_KERNELS_DENY=<op>=<impl>[,...]``: never use `<impl>` for `<op>` (``*`` = every op);
  automatic selection moves on to the next implementation.

A choice made through IMPL or PREFER is explicit: when it cannot run (not registered, denied,
or unable to run on the device) `KernelSelectionError` is raised instead of falling back, and
`UnsupportedInput` from it propagates.

The plugin's fallback profiler learns which implementation ran through `set_recorder`. With no
recorder set, dispatch does no extra work: no timing, no synchronisation.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import torch

logger = logging.getLogger("sglx_kernels")

IMPLEMENTATIONS: Final = ("vendor", "triton", "composite", "native")
ENV_IMPL: Final = "SGLX_KERNELS_IMPL"
ENV_PREFER: Final = "SGLX_KERNELS_PREFER"
ENV_DENY: Final = "SGLX_KERNELS_DENY"

# (op, implementation, seconds or None): seconds only when set_recorder(..., timed=True).
Recorder = Callable[[str, str, float | None], None]
# Why an implementation cannot run on a device, or None when it can.
Availability = Callable[[torch.device], str | None]

_OP_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class UnsupportedInput(ValueError):
    """Raised by an implementation for a valid call it does not cover.

    Automatic selection catches it and tries the next implementation (logging once); an
    explicit choice lets it propagate. Invalid calls raise plain ValueError before dispatch.
    """


class KernelSelectionError(RuntimeError):
    """The environment or caller asked for an implementation that cannot run here."""


def _runs_anywhere(device: torch.device) -> str | None:
    return None


@dataclass(frozen=True)
class Implementation:
    """One registered implementation of one op."""

    op: str
    name: str
    fn: Callable[..., Any] = field(repr=False)
    unavailable_reason: Availability = field(default=_runs_anywhere, repr=False)


@dataclass(frozen=True)
class Choice:
    """The outcome of selection for one op on one device, for dispatch and for reports."""

    op: str
    device: str
    implementations: tuple[Implementation, ...]  # tried in this order; the first normally runs
    explicit: bool  # chosen through SGLX_KERNELS_IMPL / SGLX_KERNELS_PREFER
    skipped: tuple[tuple[str, str], ...] = field(default=())  # (implementation, why), by priority

    @property
    def selected(self) -> str:
        return self.implementations[0].name

    @property
    def chain(self) -> tuple[str, ...]:
        return tuple(impl.name for impl in self.implementations)


_ops: dict[str, dict[str, Implementation]] = {}
_choices: dict[tuple[str, torch.device, str, str, str], Choice] = {}
_warned: set[tuple[str, ...]] = set()
_recorder: Recorder | None = None
_timed = False


# --- registration ---------------------------------------------------------------------------


def register(
    op: str,
    impl: str,
    fn: Callable[..., Any],
    *,
    unavailable_reason: Availability | None = None,
    replace: bool = False,
) -> None:
    """Register `fn` as implementation `impl` of `op`.

    `unavailable_reason(device)` says why `fn` cannot run on a device (None: it can); leave it
    out for implementations that run wherever torch does. Registering an (op, impl) pair twice
    raises unless `replace` is True, so two plug-ins cannot silently overwrite each other.
    """
    if impl not in IMPLEMENTATIONS:
        raise ValueError(
            f"cannot register {op!r}: unknown implementation {impl!r}; "
            f"known: {', '.join(IMPLEMENTATIONS)}"
        )
    if not _OP_NAME.match(op):
        raise ValueError(f"cannot register {op!r}: op names are lower_snake_case")
    impls = _ops.setdefault(op, {})
    if impl in impls and not replace:
        raise ValueError(f"{op!r} already has a {impl!r} implementation; pass replace=True")
    impls[impl] = Implementation(op, impl, fn, unavailable_reason or _runs_anywhere)
    _choices.clear()


def unregister(op: str, impl: str | None = None) -> None:
    """Remove one implementation of `op`, or the whole op when `impl` is None."""
    impls = _require_op(op)
    if impl is None:
        del _ops[op]
    elif impl in impls:
        del impls[impl]
    else:
        raise ValueError(f"{op!r} has no {impl!r} implementation; registered: {', '.join(impls)}")
    _choices.clear()


def reset() -> None:
    """Forget cached choices and one-time warnings (after changing devices or drivers; tests)."""
    _choices.clear()
    _warned.clear()


def ops() -> tuple[str, ...]:
    """Names of the registered ops, sorted."""
    return tuple(sorted(_ops))


def implementations(op: str) -> tuple[str, ...]:
    """Implementations registered for `op`, in priority order."""
    return tuple(name for name in IMPLEMENTATIONS if name in _require_op(op))


def _require_op(op: str) -> dict[str, Implementation]:
    try:
        return _ops[op]
    except KeyError:
        raise ValueError(f"unknown op {op!r}; registered: {', '.join(ops())}") from None


# --- environment ----------------------------------------------------------------------------


def _parse_impl(value: str, variable: str) -> str | None:
    impl = value.strip()
    if impl in ("", "auto"):
        return None
    if impl not in IMPLEMENTATIONS:
        raise ValueError(
            f"{variable}={value!r}: unknown implementation; use one of "
            f"{', '.join(IMPLEMENTATIONS)}, or auto"
        )
    return impl


def _parse_pairs(value: str, variable: str) -> list[tuple[str, str]]:
    """``op=impl,op=impl`` -> [(op, impl)], with errors that quote the bad item."""
    pairs = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        op, sep, impl = item.partition("=")
        op, impl = op.strip(), impl.strip()
        if not sep or not op or not impl:
            raise ValueError(
                f"{variable}: {item!r} is not <op>=<implementation>, e.g. rms_norm=triton"
            )
        if op != "*" and op not in _ops:
            raise ValueError(
                f"{variable}: unknown op {op!r} in {item!r}; use * or one of {', '.join(ops())}"
            )
        if impl not in IMPLEMENTATIONS:
            raise ValueError(
                f"{variable}: unknown implementation {impl!r} in {item!r}; "
                f"use one of {', '.join(IMPLEMENTATIONS)}"
            )
        pairs.append((op, impl))
    return pairs


def _explicit_choice(op: str, impl_env: str, prefer_env: str) -> tuple[str, str] | None:
    """(implementation, the setting that asked for it), or None for automatic selection."""
    prefer = dict(_parse_pairs(prefer_env, ENV_PREFER))
    if op in prefer:
        return prefer[op], f"{ENV_PREFER}={prefer_env}"
    if "*" in prefer:
        return prefer["*"], f"{ENV_PREFER}={prefer_env}"
    impl = _parse_impl(impl_env, ENV_IMPL)
    return (impl, f"{ENV_IMPL}={impl_env}") if impl else None


def _denied(op: str, deny_env: str) -> set[str]:
    return {impl for name, impl in _parse_pairs(deny_env, ENV_DENY) if name in (op, "*")}


# --- selection ------------------------------------------------------------------------------


def _warn_once(key: tuple[str, ...], message: str, *args: object) -> None:
    if key not in _warned:
        _warned.add(key)
        logger.warning(message, *args)


def _build_choice(
    op: str, device: torch.device, impl_env: str, prefer_env: str, deny_env: str
) -> Choice:
    registered = _require_op(op)
    denied = _denied(op, deny_env)
    explicit = _explicit_choice(op, impl_env, prefer_env)
    if explicit is not None:
        name, setting = explicit
        if name not in registered:
            raise KernelSelectionError(
                f"{setting} asks for {name!r} for {op}, but {op} has no {name!r} implementation; "
                f"registered: {', '.join(implementations(op))}"
            )
        if name in denied:
            raise KernelSelectionError(
                f"{setting} asks for {name!r} for {op}, but {ENV_DENY}={deny_env} denies it; "
                "change one of the two settings"
            )
        reason = registered[name].unavailable_reason(device)
        if reason is not None:
            raise KernelSelectionError(
                f"{setting} asks for {name!r} for {op}, but it cannot run on {device}: {reason}. "
                f"Unset the setting to fall back automatically, or choose one of: "
                f"{', '.join(n for n in implementations(op) if n != name)}"
            )
        return Choice(op, str(device), (registered[name],), explicit=True)

    chain: list[Implementation] = []
    skipped: list[tuple[str, str]] = []
    for name in IMPLEMENTATIONS:
        impl = registered.get(name)
        if impl is None:
            skipped.append((name, "not registered"))
        elif name in denied:
            skipped.append((name, f"denied by {ENV_DENY}"))
        elif (reason := impl.unavailable_reason(device)) is not None:
            skipped.append((name, reason))
        else:
            chain.append(impl)
    if not chain:
        why = "; ".join(f"{name}: {reason}" for name, reason in skipped)
        raise KernelSelectionError(f"no implementation of {op} can run on {device} ({why})")
    for name, reason in skipped:
        if name in registered and not reason.startswith("denied"):
            _warn_once(
                ("unavailable", op, device.type, name),
                "sglx_kernels: %s on %s falls back from %s to %s: %s",
                op,
                device,
                name,
                chain[0].name,
                reason,
            )
    return Choice(op, str(device), tuple(chain), explicit=False, skipped=tuple(skipped))


def _choice(op: str, device: torch.device) -> Choice:
    env = os.environ
    impl_env = env.get(ENV_IMPL, "")
    prefer_env = env.get(ENV_PREFER, "")
    deny_env = env.get(ENV_DENY, "")
    key = (op, device, impl_env, prefer_env, deny_env)
    choice = _choices.get(key)
    if choice is None:
        choice = _choices[key] = _build_choice(op, device, impl_env, prefer_env, deny_env)
    return choice


def choose(op: str, device: torch.device | str) -> Choice:
    """The selection for `op` on `device`: chain, whether explicit, what was skipped and why."""
    return _choice(op, torch.device(device))


def select(op: str, device: torch.device | str) -> str:
    """Name of the implementation that runs `op` on `device` (raises KernelSelectionError when
    an explicit choice cannot run)."""
    return _choice(op, torch.device(device)).selected


def describe(device: torch.device | str) -> tuple[Choice, ...]:
    """The selection for every registered op on `device`, for the plugin's report."""
    return tuple(choose(op, device) for op in ops())


# --- dispatch and the recorder --------------------------------------------------------------


def set_recorder(recorder: Recorder | None, *, timed: bool = False) -> None:
    """Call ``recorder(op, implementation, seconds)`` after every dispatched op; None removes it.

    With ``timed=True`` the device is synchronised before and after the op and ``seconds`` is
    its wall time (profiling only: it serialises the stream). During CUDA graph capture or
    torch.compile tracing the op is recorded with ``seconds=None`` and no synchronisation.
    """
    global _recorder, _timed
    _recorder = recorder
    _timed = timed and recorder is not None


def _synchronize(device: torch.device) -> None:
    if device.type != "cpu":
        torch.get_device_module(device).synchronize(device)


def _graph_capturing(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def _run_recorded(
    recorder: Recorder,
    impl: Implementation,
    device: torch.device,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    if torch.compiler.is_compiling():
        return impl.fn(*args, **kwargs)
    if not _timed or _graph_capturing(device):
        result = impl.fn(*args, **kwargs)
        recorder(impl.op, impl.name, None)
        return result
    _synchronize(device)
    start = time.perf_counter()
    result = impl.fn(*args, **kwargs)
    _synchronize(device)
    recorder(impl.op, impl.name, time.perf_counter() - start)
    return result


def call(op: str, device: torch.device, *args: Any, **kwargs: Any) -> Any:
    """Run `op` with the implementation chosen for `device` (the op modules' dispatch)."""
    choice = _choice(op, device)
    last = len(choice.implementations) - 1
    for position, impl in enumerate(choice.implementations):
        try:
            recorder = _recorder
            if recorder is None:
                return impl.fn(*args, **kwargs)
            return _run_recorded(recorder, impl, device, args, kwargs)
        except UnsupportedInput as exc:
            if choice.explicit or position == last:
                raise
            _warn_once(
                ("unsupported", op, device.type, impl.name, type(exc).__name__, str(exc)),
                "sglx_kernels: %s falls back from %s to %s for this input: %s",
                op,
                impl.name,
                choice.implementations[position + 1].name,
                exc,
            )
    raise AssertionError("unreachable: the last implementation returned or raised")
