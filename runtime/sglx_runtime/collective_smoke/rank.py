"""One rank: the rendezvous, the all-reduce and its check, the result posted to the store."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sglx_core.errors import SglxError
from sglx_core.gate.collective import (
    CollectiveReport,
    MissingRank,
    Problem,
)
from sglx_runtime.collective_smoke.report import _bare, summarize
from sglx_runtime.collective_smoke.settings import (
    ACK_WAIT_S,
    KEY,
    MARGIN_S,
    POLL_S,
    Settings,
    _clip,
    _ranked,
    _say,
)

# ---------------------------------------------------------------------------------------------
# One rank
# ---------------------------------------------------------------------------------------------


class _Unreachable(Exception):
    """This rank could not reach the master within the timeout."""


@dataclass(frozen=True)
class Outcome:
    """What one rank hands its node's launcher: the exit code, and (local rank 0) the report."""

    code: int
    report: CollectiveReport | None = None


def run_rank(s: Settings, local_rank: int) -> Outcome:
    """The whole smoke for one rank: rendezvous, all-reduce, results (local rank 0: the node's
    report). Expected failures become the outcome; nothing here raises for them."""
    rank = s.rank_of(local_rank)
    started = time.monotonic()
    try:
        torch, dist = _import_torch()
        _check_environment(torch, dist, s, local_rank)
        store = _connect(dist, s, rank, deadline=started + s.timeout_s)
    except SglxError as exc:
        _say(_ranked(rank, str(exc)))
        return Outcome(2, _bare(s, error=Problem(exc.code, exc.message, exc.hint)))
    except _Unreachable as exc:
        _say(_ranked(rank, str(exc)))
        finding = Problem(
            "master_unreachable",
            str(exc),
            f"start the smoke on {s.node_name(0)} (node rank 0) first or at the same time, "
            f"and check that this node reaches {s.master} (firewall, --master-addr an address "
            "of node 0, the same --master-port everywhere)",
        )
        own = tuple(s.ranks_of(s.node_rank))
        missing = tuple(MissingRank(r, s.node_rank, s.node_name(s.node_rank)) for r in own)
        return Outcome(1, _bare(s, findings=(finding,), missing=missing))
    try:
        return _run_connected(torch, dist, s, local_rank, store, started)
    except SglxError as exc:  # the same rank twice: a usage error of the group
        _say(_ranked(rank, str(exc)))
        return Outcome(2, _bare(s, error=Problem(exc.code, exc.message, exc.hint)))
    except _Unreachable as exc:  # rank 0 went away mid-way
        _say(_ranked(rank, str(exc)))
        finding = Problem("master_lost", str(exc), f"read the output of the smoke on {s.master}")
        return Outcome(1, _bare(s, findings=(finding,)))


def _run_connected(
    torch: Any, dist: Any, s: Settings, local_rank: int, store: Any, started: float
) -> Outcome:
    rank, world = s.rank_of(local_rank), s.world_size
    hostname = socket.gethostname()
    arrivals = _rendezvous(store, s, rank, hostname, started)
    if len(arrivals) < world:
        report = summarize(s, arrivals, {})
        if local_rank == 0:
            for finding in report.findings:
                _say(finding.message)
        return Outcome(1, report)
    node_pid = f"node {s.node_rank}, local rank {local_rank}, pid {os.getpid()}"
    _say(f"rank {rank}/{world} on {hostname} arrived ({node_pid})")
    result = measure(torch, dist, s, local_rank, store)
    _store_call(store.set, f"{KEY}/result/{rank}", json.dumps(result))
    try:
        if local_rank != 0:
            return Outcome(0 if result["error"] is None and result["wrong"] is None else 1)
        results = _collect(store, world, deadline=time.monotonic() + s.timeout_s)
        report = summarize(s, arrivals, results)
        if rank == 0:
            _linger(store, f"{KEY}/read", s.nnodes - 1, time.monotonic() + s.timeout_s)
        else:
            _store_call(store.add, f"{KEY}/read", 1)
        return Outcome(report.exit_code, report)
    finally:
        with contextlib.suppress(Exception):
            if dist.is_initialized():
                dist.destroy_process_group()


def _import_torch() -> tuple[Any, Any]:
    try:
        import torch
        import torch.distributed as dist
    except ImportError as exc:
        raise SglxError(
            f"torch cannot be imported here: {exc}",
            hint="run the smoke inside the serving image, whose Python has torch",
            code="environment",
        ) from None
    if not dist.is_available():
        raise SglxError(
            "this torch is built without torch.distributed",
            hint="run the smoke inside the serving image",
            code="environment",
        )
    return torch, dist


def _check_environment(torch: Any, dist: Any, s: Settings, local_rank: int) -> None:
    """Refuse what cannot work on this node before arriving: the others then see this rank
    missing and this node says why."""
    if not dist.is_backend_available(s.backend):  # torch >= 2.3; the images carry 2.9
        raise SglxError(
            f"this torch has no {s.backend!r} distributed backend",
            hint="run the smoke in the serving image of this arch, with the profile's "
            "platform.distributed_backend",
            code="environment",
        )
    if s.device_type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if local_rank >= count:
            raise SglxError(
                f"--nproc-per-node {s.nproc_per_node} needs {s.nproc_per_node} device(s); "
                f"this process sees {count}",
                hint="pass the node's device count, or give the container the devices "
                "(--device flags; HIP_VISIBLE_DEVICES/CUDA_VISIBLE_DEVICES)",
                code="environment",
            )


def _connect(dist: Any, s: Settings, rank: int, *, deadline: float) -> Any:
    """Rank 0: the store's server. Others: a client, once the master's port answers.

    The port is waited for with plain sockets: the store's own client retries with growing
    delays and overshoots its timeout by seconds, logging a stack trace per attempt."""
    timeout = timedelta(seconds=s.timeout_s)
    if rank == 0:
        try:
            return dist.TCPStore(
                s.master_addr, s.master_port, is_master=True, wait_for_workers=False,
                timeout=timeout,
            )  # fmt: skip
        except RuntimeError as exc:
            raise SglxError(
                f"rank 0 cannot serve the rendezvous on {s.master}: {_clip(exc)}",
                hint=f"choose a free --master-port (`ss -ltnp sport = :{s.master_port}` shows "
                "what holds it) and pass the same one on every node",
                code="environment",
            ) from None
    while True:
        try:
            with socket.create_connection((s.master_addr, s.master_port), timeout=1.0):
                break
        except OSError:
            if time.monotonic() >= deadline:
                raise _Unreachable(
                    f"rank {rank} on node {s.node_rank} ({s.node_name(s.node_rank)}) could not "
                    f"reach the master {s.master} (node 0, {s.node_name(0)}) within "
                    f"{s.timeout_s:g} s"
                ) from None
            time.sleep(POLL_S * 5)
    try:
        return dist.TCPStore(s.master_addr, s.master_port, is_master=False, timeout=timeout)
    except RuntimeError as exc:
        raise _Unreachable(
            f"rank {rank}: the master {s.master} accepts connections but is not the smoke's "
            f"rendezvous: {_clip(exc)}"
        ) from None


def _rendezvous(
    store: Any, s: Settings, rank: int, hostname: str, started: float
) -> dict[int, dict[str, Any]]:
    """Check in; rank 0 waits for the others and publishes who arrived. The arrived ranks, by
    rank: {"hostname", "pid"}."""
    mine = json.dumps({"hostname": hostname, "pid": os.getpid()})
    key = f"{KEY}/arrived/{rank}"
    held = _store_call(store.compare_set, key, "", mine)
    if held != mine.encode():
        other = json.loads(held)
        raise SglxError(
            f"rank {rank} already arrived from {other['hostname']} (pid {other['pid']})",
            hint="every node needs its own --node-rank, from 0 to nnodes-1, and the same "
            "--nproc-per-node",
            code="usage",
        )
    _store_call(store.add, f"{KEY}/count", 1)
    world = s.world_size
    if rank == 0:
        deadline = started + s.timeout_s
        while _store_call(store.add, f"{KEY}/count", 0) < world and time.monotonic() < deadline:
            time.sleep(POLL_S)
        arrivals = {
            r: json.loads(_store_call(store.get, f"{KEY}/arrived/{r}"))
            for r in range(world)
            if _store_call(store.check, [f"{KEY}/arrived/{r}"])
        }
        _store_call(store.set, f"{KEY}/roster", json.dumps(arrivals))
        if len(arrivals) < world:
            # The ranks that did arrive read the roster and stop too; the store stays up until
            # they have (or a moment has passed).
            _linger(store, f"{KEY}/seen", len(arrivals) - 1, time.monotonic() + ACK_WAIT_S)
        return arrivals
    deadline = time.monotonic() + s.timeout_s + MARGIN_S
    while not _store_call(store.check, [f"{KEY}/roster"]):
        if time.monotonic() >= deadline:
            raise _Unreachable(
                f"rank {rank}: the master {s.master} published no roster within "
                f"{s.timeout_s + MARGIN_S:g} s"
            )
        time.sleep(POLL_S)
    roster = json.loads(_store_call(store.get, f"{KEY}/roster"))
    _store_call(store.add, f"{KEY}/seen", 1)
    return {int(r): v for r, v in roster.items()}


def measure(torch: Any, dist: Any, s: Settings, local_rank: int, store: Any) -> dict[str, Any]:
    """Join the group and time the all-reduce: {"seconds", "wrong", "error", "error_code"}.
    Failures are recorded, never raised: every rank still posts a result."""
    rank, world = s.rank_of(local_rank), s.world_size
    out: dict[str, Any] = {"seconds": None, "wrong": None, "error": None, "error_code": None}
    try:
        if s.device_type == "cpu":
            device = torch.device("cpu")
        else:
            torch.cuda.set_device(local_rank)
            device = torch.device(s.device_type, local_rank)
        dist.init_process_group(
            s.backend, store=dist.PrefixStore(f"{KEY}/pg", store), rank=rank,
            world_size=world, timeout=timedelta(seconds=s.timeout_s),
        )  # fmt: skip
    except Exception as exc:  # whatever the backend raises, reported with its text
        out.update(error=f"could not join the {s.backend} group: {_clip(exc)}",
                   error_code="collective_failed")  # fmt: skip
        return out

    def sync() -> None:
        if s.device_type != "cpu":
            torch.cuda.synchronize()

    expected = world * (world + 1) / 2
    try:
        buffer = torch.full((s.size_bytes // 4,), float(rank + 1), dtype=torch.float32,
                            device=device)  # fmt: skip
        dist.all_reduce(buffer)
        sync()
        wrong = _wrong(torch, buffer, expected)
        buffer.zero_()  # zeros stay zeros: repeated sums of rank+1 would overflow float32
        for _ in range(s.warmup):
            dist.all_reduce(buffer)
        dist.all_reduce(torch.zeros(1, device=device))  # line the ranks up before the clock
        sync()
        begin = time.perf_counter()
        for _ in range(s.iters):
            dist.all_reduce(buffer)
        sync()
        out["seconds"] = (time.perf_counter() - begin) / s.iters
        buffer.fill_(float(rank + 1))
        dist.all_reduce(buffer)
        sync()
        out["wrong"] = wrong or _wrong(torch, buffer, expected)
    except Exception as exc:
        out.update(error=f"the all-reduce failed: {_clip(exc)}", error_code="collective_failed")
    return out


def _wrong(torch: Any, buffer: Any, expected: float) -> str | None:
    """None when every element holds `expected`; else how many do not, and the first."""
    bad = buffer != expected
    count = int(bad.sum().item())
    if count == 0:
        return None
    first = int(torch.nonzero(bad)[0].item())
    return (
        f"{count} of {buffer.numel()} elements of the sum are wrong (first at index {first}: "
        f"{float(buffer[first].item())!r}, expected {expected!r})"
    )


def _collect(store: Any, world: int, *, deadline: float) -> dict[int, dict[str, Any]]:
    """Every rank's posted result, waited for until `deadline`; absent ones are left out."""
    keys = {r: f"{KEY}/result/{r}" for r in range(world)}
    while time.monotonic() < deadline and not _store_call(store.check, list(keys.values())):
        time.sleep(POLL_S)
    return {
        r: json.loads(_store_call(store.get, key))
        for r, key in keys.items()
        if _store_call(store.check, [key])
    }


def _linger(store: Any, key: str, count: int, deadline: float) -> None:
    """Keep the store (this process) up until `count` readers have added to `key`."""
    while count > 0 and time.monotonic() < deadline:
        if _store_call(store.add, key, 0) >= count:
            return
        time.sleep(POLL_S)


def _store_call(call: Any, *args: Any) -> Any:
    """One store operation; a store that went away (rank 0 exited) becomes _Unreachable."""
    try:
        return call(*args)
    except RuntimeError as exc:
        raise _Unreachable(f"lost the rendezvous store: {_clip(exc)}") from None
