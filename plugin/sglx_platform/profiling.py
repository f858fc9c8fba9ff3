"""Fallback profiling: which implementation ran for each op, and how much time it took.

Switched on with SGLX_PROFILE_FALLBACKS=1. Every sglang fused op (`BaseFusedOp.forward`) is
timed (with a device synchronise around it, so this is a diagnostic mode, not a serving mode)
and attributed to an implementation class: vendor (sgl-kernel, AITER, ...), triton, composite
or native. sglx kernels report their own choice through `sglx_kernels.registry`'s recorder.
The summary flags any fallback (composite or native) above 5% of the total op time; it is
written as JSON to SGLX_PROFILE_FALLBACKS_DIR (fallbacks-<pid>.json, refreshed every few
seconds; $TMPDIR/sglx-fallbacks when unset) and printed to the log when the process exits.
sglang ends its schedulers with SIGKILL, so in the image sglx-serve prints the merged table of
the reports once the server is gone (`summary_of_reports`).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sglx_core.output_files import atomic_write_text
from sglx_core.report import Table

logger = logging.getLogger(__name__)

ENABLE_ENV = "SGLX_PROFILE_FALLBACKS"
DIR_ENV = "SGLX_PROFILE_FALLBACKS_DIR"
THRESHOLD = 0.05
FLUSH_EVERY_S = 1.0
DEFAULT_DIR_NAME = "sglx-fallbacks"
FALLBACKS = frozenset({"composite", "native"})
# sglang forward method -> implementation class.
METHOD_IMPLS = {
    "forward_native": "native",
    "forward_torch_compile": "composite",
    "forward_triton": "triton",
}


def enabled() -> bool:
    return os.environ.get(ENABLE_ENV, "0") not in ("", "0", "false", "False")


@dataclass(frozen=True)
class Row:
    op: str
    impl: str
    calls: int
    seconds: float
    share: float  # of all op time
    fallback: bool
    flagged: bool


class FallbackProfiler:
    """Accumulates (op, implementation) -> calls and seconds; thread-safe."""

    def __init__(self, out_dir: Path | None = None) -> None:
        self.out_dir = out_dir
        self._stats: dict[tuple[str, str], list[float]] = {}
        self._lock = threading.Lock()
        self.dirty = False
        self.kernel_impl = threading.local()  # what an sglx kernel reported inside an op

    def record(self, op: str, impl: str, seconds: float) -> None:
        self.add(op, impl, 1, seconds)

    def add(self, op: str, impl: str, calls: int, seconds: float) -> None:
        with self._lock:
            entry = self._stats.setdefault((op, impl), [0, 0.0])
            entry[0] += calls
            entry[1] += seconds
            self.dirty = True

    def rows(self) -> list[Row]:
        with self._lock:
            stats = {k: tuple(v) for k, v in self._stats.items()}
        total = sum(seconds for _, seconds in stats.values()) or 1.0
        rows = []
        for (op, impl), (calls, seconds) in stats.items():
            share = seconds / total
            fallback = impl in FALLBACKS
            rows.append(
                Row(op, impl, int(calls), seconds, share, fallback, fallback and share > THRESHOLD)
            )
        return sorted(rows, key=lambda r: r.seconds, reverse=True)

    def report(self) -> dict[str, Any]:
        rows = self.rows()
        return {
            "pid": os.getpid(),
            "threshold": THRESHOLD,
            "total_seconds": sum(r.seconds for r in rows),
            "ops": [asdict(r) for r in rows],
            "flagged": [f"{r.op}:{r.impl}" for r in rows if r.flagged],
        }

    def flush(self) -> None:
        if self.out_dir is None:
            return
        self.dirty = False
        self.out_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(
            self.out_dir / f"fallbacks-{os.getpid()}.json",
            json.dumps(self.report(), indent=2) + "\n",
        )

    def summary(self) -> str:
        rows = self.rows()
        table = Table(
            ("op", "impl", "calls", "ms", "share", ""),
            tuple(
                (
                    r.op,
                    r.impl,
                    str(r.calls),
                    f"{r.seconds * 1e3:.1f}",
                    f"{r.share:.1%}",
                    "FALLBACK > 5%" if r.flagged else "",
                )
                for r in rows
            ),
            title="sglx fallback profile (share of op time)",
        )
        return table.render()


_PROFILER: FallbackProfiler | None = None


def profiler() -> FallbackProfiler | None:
    return _PROFILER


def install() -> FallbackProfiler:
    """Start profiling in this process: time every fused op, listen to sglx kernels."""
    global _PROFILER
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    _PROFILER = FallbackProfiler(report_dir())
    active = _PROFILER
    try:
        from sglx_kernels import registry

        registry.set_recorder(lambda op, impl, seconds: setattr(active.kernel_impl, "impl", impl))
    except ImportError:
        logger.warning("sglx: sglx_kernels not installed; only sglang's own ops are profiled")
    HookRegistry.register(
        "sglang.kernels.fused_op.BaseFusedOp.forward", _timed_forward, HookType.AROUND
    )
    atexit.register(_at_exit, active)
    threading.Thread(target=_flush_while_running, args=(active,), daemon=True).start()
    return active


def _flush_while_running(active: FallbackProfiler) -> None:
    """Keep the JSON report current: sglang stops its schedulers with SIGKILL, so the report a
    process leaves is the last one written here (at most FLUSH_EVERY_S old)."""
    while True:
        time.sleep(FLUSH_EVERY_S)
        if active.dirty:
            active.flush()


def report_dir() -> Path:
    """Where reports go: $SGLX_PROFILE_FALLBACKS_DIR, else a folder in the temp dir."""
    return Path(os.environ.get(DIR_ENV) or Path(tempfile.gettempdir()) / DEFAULT_DIR_NAME)


def summary_of_reports(folder: Path, since: float) -> str | None:
    """The table of every report in `folder` written after `since` (epoch seconds), merged:
    what sglx-serve prints once the server's processes are gone."""
    merged = FallbackProfiler()
    for path in sorted(folder.glob("fallbacks-*.json")):
        try:
            if path.stat().st_mtime < since:
                continue
            report = json.loads(path.read_text())
            for row in report["ops"]:
                merged.add(str(row["op"]), str(row["impl"]), int(row["calls"]), row["seconds"])
        except (OSError, ValueError, KeyError, TypeError):
            logger.warning("sglx: skipping an unreadable fallback report %s", path)
    return merged.summary() if merged.rows() else None


def _timed_forward(original: Callable[..., Any], op: Any, *args: Any, **kwargs: Any) -> Any:
    active = _PROFILER
    if active is None:
        return original(op, *args, **kwargs)
    sync = _synchronizer(args)
    active.kernel_impl.impl = None
    sync()
    started = time.perf_counter()
    result = original(op, *args, **kwargs)
    sync()
    elapsed = time.perf_counter() - started
    impl = getattr(active.kernel_impl, "impl", None) or classify(op)
    active.record(type(op).__name__, impl, elapsed)
    return result


def classify(op: Any) -> str:
    """The implementation class of the forward sglang resolved for `op`."""
    method = getattr(op, "_forward_method", None)
    name = getattr(getattr(method, "__func__", method), "__name__", "forward_native")
    return METHOD_IMPLS.get(name, "vendor" if name.startswith("forward_") else "native")


def _synchronizer(args: tuple[Any, ...]) -> Callable[[], None]:
    import torch

    for arg in args:
        if isinstance(arg, torch.Tensor):
            if arg.device.type == "cuda":
                return torch.cuda.synchronize
            break
    return lambda: None


def _at_exit(active: FallbackProfiler) -> None:
    if not active.rows():
        return
    active.flush()
    logger.warning("%s", active.summary())
