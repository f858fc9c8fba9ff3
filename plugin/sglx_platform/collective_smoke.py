"""The serving gate's collective smoke: an all-reduce over every device a serving group will use.

Started on each node of a group before the server (`python -m sglx_platform.collective_smoke`),
one process per local device, with the backend the profile names (gloo on cpu; torch's 'nccl'
name, which RCCL serves on ROCm and BKCL through torch_xmlir on Kunlun). It automates the
debugging step multi-node deadlocks call for, "a barrier, then every rank prints its rank and
host", and bounds it:

1. Rendezvous, before any process group exists. Rank 0 (node 0, local rank 0) serves a
   torch TCPStore at --master-addr:--master-port; every rank writes `arrived/<rank>` there. Rank
   0 waits at most --timeout-s for all of them, then names exactly which ranks never arrived
   and the host each should have run on (--hosts), and every process exits 1 instead of
   hanging in a collective. A node that cannot reach the master gives up at the same timeout,
   naming the master. After a complete rendezvous each rank prints "rank R/W on HOST arrived".
2. The all-reduce: the process group over that store, a float32 buffer of --size-bytes, each
   rank filled with rank+1 so the sum must be n(n+1)/2 everywhere (checked before and after the
   timed loop), --warmup then --iters timed operations. The slowest rank's time gives algbw and
   busbw (`sglx_core.gate.collective.bus_bandwidth`, nccl-tests' formula), held against
   --floor-gbps where the profile sets one.
3. Every rank posts its result to the store; each node's local rank 0 collects all of them and
   the node prints one report (`CollectiveReport`; `--json`: the document only, on stdout).
   Node 0's is the group's. Progress lines go to stderr.

Exit codes: 0 ok; 1 findings (a missing rank, an unreachable master, a failed or wrong
all-reduce, bandwidth below the floor); 2 the smoke could not run here (usage, no torch, no
such backend or device, the master port taken). Expected failures print no traceback.

Every setting is a command-line argument; torch is imported only by the ranks, so the launcher
of a node with several devices costs no torch import of its own.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import multiprocessing
import os
import socket
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from multiprocessing.connection import Connection
from typing import Any

from sglx_core.errors import SglxError
from sglx_core.gate.collective import (
    CollectiveReport,
    MissingRank,
    Problem,
    RankEntry,
    algorithm_bandwidth,
    bus_bandwidth,
)

PROG = "python -m sglx_platform.collective_smoke"
KEY = "sglx-collective-smoke"  # the prefix of every key this smoke writes in the store
BACKENDS = {"gloo": "cpu", "nccl": "cuda"}  # the profile's distributed_backend -> its device
DEVICE_TYPES = ("cpu", "cuda")  # the profile's platform.device_type values
# What a caller may reach for, and the spelling the profile (and torch) use instead.
ALIASES = {
    "rccl": "RCCL answers to torch's 'nccl' backend name on ROCm: pass --backend nccl",
    "bkcl": "on Kunlun, BKCL answers to torch's 'nccl' backend name through torch_xmlir "
    "(the kunlun profile's platform.distributed_backend): pass --backend nccl",
    "xpu": "on Kunlun, torch_xmlir presents the cards as 'cuda' devices and torch.xpu is "
    "unavailable (the kunlun profile's platform.device_type): pass --device-type cuda",
    "rocm": "HIP devices are 'cuda' devices to torch: pass --device-type cuda",
}
DEFAULT_SIZE = {"cpu": 8 << 20, "cuda": 64 << 20}
MAX_SIZE = 16 << 30
MAX_WORLD = 16384
POLL_S = 0.1
MARGIN_S = 5.0  # beyond --timeout-s, for a rank that waits on rank 0's own timeout
ACK_WAIT_S = 2.0  # how long rank 0 keeps the store up for ranks still reading a failed roster
MAX_MESSAGE = 600  # an exception's text quoted in a finding is clipped to this


@dataclass(frozen=True)
class Settings:
    """One node's view of the group (every field a command-line argument)."""

    nnodes: int
    node_rank: int
    nproc_per_node: int
    master_addr: str
    master_port: int
    hosts: tuple[str, ...]  # the name of each node, by node rank (empty: "node N")
    backend: str
    device_type: str
    size_bytes: int
    iters: int
    warmup: int
    timeout_s: float
    floor_gbps: float | None
    as_json: bool = False

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    @property
    def master(self) -> str:
        return f"{self.master_addr}:{self.master_port}"

    def rank_of(self, local_rank: int) -> int:
        return self.node_rank * self.nproc_per_node + local_rank

    def node_of(self, rank: int) -> int:
        return rank // self.nproc_per_node

    def node_name(self, node: int) -> str:
        return self.hosts[node] if self.hosts else f"node {node}"

    def ranks_of(self, node: int) -> range:
        return range(node * self.nproc_per_node, (node + 1) * self.nproc_per_node)


# ---------------------------------------------------------------------------------------------
# The command line
# ---------------------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """Usage errors raise instead of exiting, so that --json still gets its report."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise SglxError(f"{PROG}: {message}", hint=f"{PROG} --help", code="usage")


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=PROG,
        description="All-reduce over every device of a serving group before the server starts: "
        "every rank checks in at a rendezvous on the master (a missing rank is named with its "
        "host within --timeout-s), then the ranks all-reduce --size-bytes and the bus "
        "bandwidth is held against --floor-gbps. Start it on every node of the group with the "
        "same arguments except --node-rank.",
        epilog="exit codes: 0 ok, 1 findings (missing rank, unreachable master, wrong sum, "
        "below the floor), 2 the smoke could not run here",
    )
    p.add_argument("--nnodes", type=_count("--nnodes", 1), default=1, help="nodes in the group")
    p.add_argument("--node-rank", type=_count("--node-rank", 0), default=0, help="this node's")
    p.add_argument(
        "--nproc-per-node",
        type=_count("--nproc-per-node", 1),
        default=1,
        help="devices of this node the server uses: one rank each (default 1)",
    )
    p.add_argument("--master-addr", default="127.0.0.1", help="node 0's address (rendezvous)")
    p.add_argument("--master-port", type=_port, default=29500, help="rendezvous port on node 0")
    p.add_argument(
        "--hosts", default="", help="comma-separated name of each node, by node rank (messages)"
    )
    p.add_argument(
        "--backend", type=_choice("--backend", tuple(BACKENDS)), help="gloo or nccl (default: "
        "gloo on cpu, nccl on cuda; RCCL and BKCL answer to 'nccl')",
    )  # fmt: skip
    p.add_argument(
        "--device-type", type=_choice("--device-type", DEVICE_TYPES), default="cpu",
        help="cpu or cuda (ROCm and Kunlun cards are 'cuda' to torch); default cpu",
    )  # fmt: skip
    p.add_argument(
        "--size-bytes", type=_count("--size-bytes", 4), help="bytes all-reduced per operation "
        f"(float32; default {DEFAULT_SIZE['cpu'] >> 20} MiB on cpu, "
        f"{DEFAULT_SIZE['cuda'] >> 20} MiB on devices)",
    )  # fmt: skip
    p.add_argument("--iters", type=_count("--iters", 1), default=20, help="timed operations")
    p.add_argument("--warmup", type=_count("--warmup", 0), default=5, help="untimed first ones")
    p.add_argument(
        "--timeout-s", type=_positive("--timeout-s"), default=60.0,
        help="seconds each phase may take: the rendezvous, joining the group, the results",
    )  # fmt: skip
    p.add_argument(
        "--floor-gbps", type=_positive("--floor-gbps"), help="the least bus bandwidth (GB/s) "
        "that passes; none: measured, not judged",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    return p


def _count(flag: str, low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if value < low:
            raise argparse.ArgumentTypeError(
                f"{flag} must be a whole number >= {low}, not {text!r}"
            )
        return value

    return parse


def _positive(flag: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value <= 0:
            raise argparse.ArgumentTypeError(f"{flag} must be a positive number, not {text!r}")
        return value

    return parse


def _port(text: str) -> int:
    port = _count("--master-port", 1)(text)
    if port > 65535:
        raise argparse.ArgumentTypeError(f"--master-port must be 1 to 65535, not {text!r}")
    return port


def _choice(flag: str, choices: tuple[str, ...]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.lower()
        if value in choices:
            return value
        why = ALIASES.get(value, f"choose one of {', '.join(choices)}")
        raise argparse.ArgumentTypeError(f"{flag} {text!r}: {why}")

    return parse


def settings(argv: Sequence[str]) -> Settings:
    """The settings `argv` gives, or SglxError (code usage) naming the flag and the fix."""
    args = parser().parse_args(list(argv))
    hosts = tuple(h.strip() for h in args.hosts.split(",")) if args.hosts else ()
    backend = args.backend or ("gloo" if args.device_type == "cpu" else "nccl")
    if args.node_rank >= args.nnodes:
        _usage(f"--node-rank {args.node_rank} is not below --nnodes {args.nnodes}",
               "node ranks run from 0 to nnodes-1")  # fmt: skip
    if args.nnodes * args.nproc_per_node > MAX_WORLD:
        _usage(f"{args.nnodes} nodes of {args.nproc_per_node} ranks exceed {MAX_WORLD} ranks",
               "check --nnodes and --nproc-per-node")  # fmt: skip
    if hosts and (len(hosts) != args.nnodes or not all(hosts)):
        _usage(f"--hosts names {len(hosts)} node(s) for --nnodes {args.nnodes}",
               "give one non-empty name per node, in node-rank order: --hosts h0,h1")  # fmt: skip
    if backend == "nccl" and args.device_type == "cpu":
        _usage("--backend nccl all-reduces device memory, and --device-type is cpu",
               "pass --device-type cuda, or --backend gloo on cpu")  # fmt: skip
    size = args.size_bytes if args.size_bytes is not None else DEFAULT_SIZE[args.device_type]
    if size > MAX_SIZE:
        _usage(f"--size-bytes {size} is more than {MAX_SIZE >> 30} GiB",
               "the profile's size is tens or hundreds of MiB")  # fmt: skip
    return Settings(
        nnodes=args.nnodes,
        node_rank=args.node_rank,
        nproc_per_node=args.nproc_per_node,
        master_addr=args.master_addr,
        master_port=args.master_port,
        hosts=hosts,
        backend=backend,
        device_type=args.device_type,
        size_bytes=size - size % 4,  # whole float32 elements
        iters=args.iters,
        warmup=args.warmup,
        timeout_s=args.timeout_s,
        floor_gbps=args.floor_gbps,
        as_json=args.json,
    )


def _usage(message: str, hint: str) -> None:
    raise SglxError(f"{PROG}: {message}", hint=hint, code="usage")


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


# ---------------------------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------------------------


def summarize(
    s: Settings,
    arrivals: dict[int, dict[str, Any]],
    results: dict[int, dict[str, Any]],
) -> CollectiveReport:
    """The group's report from who arrived and what each rank posted (pure: no torch)."""
    world = s.world_size
    ranks: list[RankEntry] = []
    findings: list[Problem] = []
    times: list[float] = []
    for rank in range(world):
        node = s.node_of(rank)
        hostname = arrivals.get(rank, {}).get("hostname")
        host = s.hosts[node] if s.hosts else str(hostname or s.node_name(node))
        where = f"rank {rank} on {host}"
        result = results.get(rank)
        seconds = result.get("seconds") if result else None
        busbw = None
        if isinstance(seconds, int | float) and seconds > 0:
            times.append(float(seconds))
            busbw = round(bus_bandwidth(algorithm_bandwidth(s.size_bytes, seconds), world), 6)
        ranks.append(RankEntry(rank, node, host, rank in arrivals, hostname, busbw))
        if rank not in arrivals or len(arrivals) < world:
            continue
        if result is None:
            findings.append(Problem(
                "no_result", f"{where} posted no result within {s.timeout_s:g} s",
                f"read the smoke's output on {host}: the rank crashed or hangs in a collective",
            ))  # fmt: skip
            continue
        if result.get("error"):
            findings.append(Problem(
                str(result.get("error_code") or "collective_failed"),
                f"{where}: {result['error']}",
                "read the first failing rank's message; NCCL_DEBUG=INFO (RCCL, BKCL: the same "
                "variable) shows the transport each rank chose",
            ))  # fmt: skip
        if result.get("wrong"):
            findings.append(Problem(
                "wrong_sum", f"{where}: {result['wrong']}",
                f"a device or link of {host} corrupts data: run the vendor's diagnostics "
                "there (on ROCm: rvs, rccl-tests) before serving",
            ))  # fmt: skip
    missing = tuple(
        MissingRank(r, s.node_of(r), s.node_name(s.node_of(r)))
        for r in range(world)
        if r not in arrivals
    )
    findings = _missing_findings(s, missing) + findings
    algbw = busbw = None
    if times and len(times) == world:
        slowest = max(times)  # the group is as fast as its slowest rank
        algbw = round(algorithm_bandwidth(s.size_bytes, slowest), 6)
        busbw = round(bus_bandwidth(algbw, world), 6)
        if s.floor_gbps is not None and world > 1 and busbw < s.floor_gbps:
            findings.append(Problem(
                "below_floor",
                f"bus bandwidth {busbw:.3g} GB/s over {world} ranks is below the floor "
                f"{s.floor_gbps:g} GB/s",
                "check each node's links and topology (the vendor tool's view, e.g. "
                "`rocm-smi --showtopo`), that every rank has its own device, and the NCCL_ "
                "variables of the environment; the floor is the profile's",
            ))  # fmt: skip
    return CollectiveReport(
        world_size=world,
        nnodes=s.nnodes,
        node_rank=s.node_rank,
        backend=s.backend,
        device_type=s.device_type,
        size_bytes=s.size_bytes,
        iters=s.iters,
        ranks=tuple(ranks),
        missing=missing,
        busbw_gbps=busbw,
        algbw_gbps=algbw,
        floor_gbps=s.floor_gbps,
        findings=tuple(findings),
    )


def _missing_findings(s: Settings, missing: Sequence[MissingRank]) -> list[Problem]:
    """One finding per node with ranks that never arrived, naming the ranks and the host."""
    by_node: dict[int, list[int]] = {}
    for m in missing:
        by_node.setdefault(m.node_rank, []).append(m.rank)
    return [
        Problem(
            "missing_rank",
            f"rank{'s' if len(ranks) > 1 else ''} {_span(ranks)} of node {node} "
            f"({s.node_name(node)}) never arrived at the rendezvous {s.master} within "
            f"{s.timeout_s:g} s",
            f"start the smoke on {s.node_name(node)} with --node-rank {node} and the same "
            f"--nnodes, --nproc-per-node and --master-addr/--master-port, and check that it "
            f"reaches {s.master}",
        )
        for node, ranks in sorted(by_node.items())
    ]


def _span(ranks: Sequence[int]) -> str:
    """ "3", "8-15" or "1, 4": the ranks as an operator reads them."""
    if len(ranks) > 1 and list(ranks) == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    return ", ".join(str(r) for r in ranks)


def _bare(
    s: Settings,
    *,
    findings: tuple[Problem, ...] = (),
    missing: tuple[MissingRank, ...] = (),
    error: Problem | None = None,
) -> CollectiveReport:
    """A report of this node alone, for when the group was never reached (its own ranks,
    not arrived; none when an error stopped the smoke before the rendezvous)."""
    node = s.node_rank
    own = () if error else s.ranks_of(node)
    return CollectiveReport(
        world_size=s.world_size,
        nnodes=s.nnodes,
        node_rank=node,
        backend=s.backend,
        device_type=s.device_type,
        size_bytes=s.size_bytes,
        iters=s.iters,
        ranks=tuple(RankEntry(r, node, s.node_name(node), False) for r in own),
        missing=missing,
        floor_gbps=s.floor_gbps,
        findings=findings,
        error=error,
    )


def text(report: CollectiveReport) -> str:
    """The report for a person: the verdict, the bandwidth, one line per rank, the findings."""
    verdict = "ok" if report.ok else ("error" if report.error else "FAILED")
    lines = [
        f"collective smoke ({report.backend} on {report.device_type}, {report.world_size} "
        f"ranks over {report.nnodes} node(s), {report.size_bytes} bytes x {report.iters}): "
        f"{verdict}"
    ]
    if report.busbw_gbps is not None and report.algbw_gbps is not None:
        floor = "" if report.floor_gbps is None else f", floor {report.floor_gbps:g} GB/s"
        if report.world_size == 1:
            floor = " (one rank: no bus to measure, no floor applied)"
        lines.append(
            f"  busbw {report.busbw_gbps:.3f} GB/s, algbw {report.algbw_gbps:.3f} GB/s{floor}"
        )
    for r in report.ranks:
        state = "arrived" if r.arrived else "never arrived"
        speed = "" if r.busbw_gbps is None else f"  busbw {r.busbw_gbps:.3f} GB/s"
        lines.append(f"  rank {r.rank:>4}  node {r.node_rank:>3}  {r.host}  {state}{speed}")
    problems = [*report.findings, *([report.error] if report.error else [])]
    for p in problems:
        lines.append(f"{p.code}: {p.message}" + (f"\n  fix: {p.hint}" if p.hint else ""))
    return "\n".join(lines)


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


def _clip(exc: BaseException) -> str:
    """An exception's first line, clipped: backends append C++ stack traces to the message."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return first if len(first) <= MAX_MESSAGE else first[: MAX_MESSAGE - 3] + "..."


def _ranked(rank: int, message: str) -> str:
    return message if message.startswith(f"rank {rank}") else f"rank {rank}: {message}"


def _say(message: str) -> None:
    print(f"sglx collective smoke: {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    # Through the package's name, not as __main__: the spawned ranks unpickle `_child` and
    # their `Outcome` from a module both sides import under one name.
    from sglx_platform import collective_smoke

    sys.exit(collective_smoke.main())
