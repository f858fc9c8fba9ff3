"""The node's launcher: one process per local device, the report, the exit code."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import sys
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection

from sglx_core.errors import SglxError
from sglx_core.gate.collective import (
    Problem,
)
from sglx_runtime.collective_smoke.rank import Outcome, run_rank
from sglx_runtime.collective_smoke.report import _bare, text
from sglx_runtime.collective_smoke.settings import Settings, _say, settings

# ---------------------------------------------------------------------------------------------
# The node's launcher
# ---------------------------------------------------------------------------------------------


def run_node(s: Settings) -> Outcome:
    """Every local rank of this node; local rank 0's report, the worst exit code.

    A single cpu rank runs in this process (one torch import); device ranks always get their
    own process, so that a backend that aborts its process on a timeout (NCCL's watchdog) still
    leaves the launcher to report it."""
    if s.nproc_per_node == 1 and s.device_type == "cpu":
        return run_rank(s, 0)
    context = multiprocessing.get_context("spawn")
    ranks = []
    for local_rank in range(s.nproc_per_node):
        receive, send = context.Pipe(duplex=False)
        process = context.Process(
            target=_child, args=(s, local_rank, send), name=f"rank{s.rank_of(local_rank)}",
            daemon=True,
        )  # fmt: skip
        process.start()
        send.close()
        ranks.append((local_rank, process, receive))
    # Each phase of a rank is bounded by the timeout; this is the last resort for a hung one.
    deadline = time.monotonic() + 5 * s.timeout_s + 30
    outcomes: dict[int, Outcome | None] = {}
    for local_rank, process, receive in ranks:
        outcomes[local_rank] = _receive(receive, deadline)
        process.join(max(1.0, deadline - time.monotonic()))
        if process.is_alive():
            process.terminate()
            process.join(5)
    report = outcomes[0].report if outcomes[0] else None
    died = []
    for local_rank, process, _ in ranks:
        if outcomes[local_rank] is None:
            rank = s.rank_of(local_rank)
            died.append(Problem(
                "rank_died",
                f"rank {rank} (local rank {local_rank}) on {s.node_name(s.node_rank)} ended "
                f"without a result (exit code {process.exitcode})",
                "read its output above; a backend that times out may abort its process",
            ))  # fmt: skip
    if report is None:
        report = _bare(s, findings=tuple(died))
    elif died:
        report = dataclasses.replace(report, findings=(*report.findings, *died))
    worst = max([report.exit_code] + [o.code for o in outcomes.values() if o is not None])
    return Outcome(worst, report)


def _child(s: Settings, local_rank: int, send: Connection) -> None:
    try:
        send.send(run_rank(s, local_rank))
    finally:
        send.close()


def _receive(receive: Connection, deadline: float) -> Outcome | None:
    try:
        if receive.poll(max(0.0, deadline - time.monotonic())):
            outcome = receive.recv()
            return outcome if isinstance(outcome, Outcome) else None
    except (EOFError, OSError):
        pass
    return None


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        s = settings(argv)
    except SglxError as exc:
        if "--json" in argv:
            error = {"code": exc.code, "message": exc.message, "hint": exc.hint}
            print(json.dumps({"ok": False, "error": error}, indent=2))
        _say(str(exc))
        return 2
    try:
        outcome = run_node(s)
    except KeyboardInterrupt:
        _say("interrupted")
        return 2
    report = outcome.report or _bare(s)
    print(json.dumps(report.to_json(), indent=2) if s.as_json else text(report), flush=True)
    return outcome.code
