"""The smoke's settings: every one a command-line argument, checked before torch is imported."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sglx_core.arg_types import positive
from sglx_core.errors import SglxError

PROG = "python -m sglx_runtime.collective_smoke"
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
        "--timeout-s", type=positive("--timeout-s"), default=60.0,
        help="seconds each phase may take: the rendezvous, joining the group, the results",
    )  # fmt: skip
    p.add_argument(
        "--floor-gbps", type=positive("--floor-gbps"), help="the least bus bandwidth (GB/s) "
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


def _clip(exc: BaseException) -> str:
    """An exception's first line, clipped: backends append C++ stack traces to the message."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return first if len(first) <= MAX_MESSAGE else first[: MAX_MESSAGE - 3] + "..."


def _ranked(rank: int, message: str) -> str:
    return message if message.startswith(f"rank {rank}") else f"rank {rank}: {message}"


def _say(message: str) -> None:
    print(f"sglx collective smoke: {message}", file=sys.stderr, flush=True)
