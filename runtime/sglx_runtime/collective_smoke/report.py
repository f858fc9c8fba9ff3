"""The node's report from every rank's result: missing ranks, bandwidth, findings."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sglx_core.gate.collective import (
    CollectiveReport,
    MissingRank,
    Problem,
    RankEntry,
    algorithm_bandwidth,
    bus_bandwidth,
)
from sglx_runtime.collective_smoke.settings import Settings

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
