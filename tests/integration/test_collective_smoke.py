"""The collective smoke as a group runs it: real processes, a real rendezvous, gloo on cpu.

"Nodes" are processes of this machine on 127.0.0.1, each started the way an operator starts the
smoke on one host (`python -m sglx_runtime.collective_smoke`, the same arguments but
--node-rank), and each node's stdout is read back with the host's reader
(`sglx_core.gate.collective.parse_report`). No container: the plugin is installed in the test
venv, and the cpu image carries the same module and torch. Sizes are small, so each case costs
about a torch import per process.
"""

from __future__ import annotations

import subprocess
import sys
import time

from helpers.child_env import child_environment
from helpers.engine_fixtures import free_port

from sglx_core.gate.collective import CollectiveReport, parse_report

SMOKE = [sys.executable, "-m", "sglx_runtime.collective_smoke"]
SMALL = ["--size-bytes", "65536", "--iters", "3", "--warmup", "1", "--json"]


def _start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*SMOKE, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_environment(),
    )


def _finish(node: subprocess.Popen[str], name: str) -> tuple[int, CollectiveReport, str]:
    try:
        out, err = node.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        node.kill()
        out, err = node.communicate()
        raise AssertionError(f"{name} did not finish:\n{err}") from None
    assert out.strip(), f"{name} printed no report (exit {node.returncode}):\n{err}"
    return node.returncode, parse_report(out, where=f"stdout of {name}"), err


def test_two_nodes_pass_and_report_both_ranks_and_a_bandwidth() -> None:
    group = ["--nnodes", "2", "--master-port", str(free_port()), "--hosts", "alpha,beta",
             "--timeout-s", "40", "--floor-gbps", "0.000001", *SMALL]  # fmt: skip
    nodes = [_start(*group, "--node-rank", str(n)) for n in (0, 1)]
    (code0, report0, err0), (code1, report1, err1) = (
        _finish(node, f"node {n}") for n, node in enumerate(nodes)
    )
    assert (code0, code1) == (0, 0), err0 + err1
    assert report0.ok and report0.world_size == 2 and report0.backend == "gloo"
    assert [(r.rank, r.host, r.arrived) for r in report0.ranks] == [
        (0, "alpha", True),
        (1, "beta", True),
    ]
    assert report0.busbw_gbps is not None and report0.busbw_gbps > 0
    assert report0.algbw_gbps == report0.busbw_gbps  # two ranks: 2(n-1)/n = 1
    assert report0.floor_gbps == 0.000001
    # Every node prints the group's report; only the printing node differs.
    assert (report0.node_rank, report1.node_rank) == (0, 1)
    assert report1.ok and report1.busbw_gbps == report0.busbw_gbps
    assert "rank 0/2 on " in err0 and "rank 1/2 on " in err1


def test_a_node_that_never_starts_is_named_within_the_timeout() -> None:
    begin = time.monotonic()
    node0 = _start("--nnodes", "2", "--node-rank", "0", "--master-port", str(free_port()),
                   "--hosts", "alpha,beta", "--timeout-s", "5", *SMALL)  # fmt: skip
    code, report, err = _finish(node0, "node 0")
    elapsed = time.monotonic() - begin
    assert code == 1, err
    assert elapsed < 15, f"node 0 took {elapsed:.1f} s to give up on a 5 s timeout"
    assert [(m.rank, m.node_rank, m.host) for m in report.missing] == [(1, 1, "beta")]
    assert [(r.rank, r.arrived) for r in report.ranks] == [(0, True), (1, False)]
    (finding,) = report.findings
    assert finding.code == "missing_rank"
    assert "rank 1 of node 1 (beta) never arrived" in finding.message
    assert "Traceback" not in err


def test_one_node_runs_a_rank_per_device_and_judges_the_floor() -> None:
    # Two ranks in their own processes; a floor no loopback reaches turns the run into a finding.
    node = _start("--nproc-per-node", "2", "--master-port", str(free_port()), "--hosts", "solo",
                  "--timeout-s", "40", "--floor-gbps", "1000000", *SMALL)  # fmt: skip
    code, report, err = _finish(node, "the node")
    assert code == 1, err
    assert [(r.rank, r.node_rank, r.host, r.arrived) for r in report.ranks] == [
        (0, 0, "solo", True),
        (1, 0, "solo", True),
    ]
    assert all(r.busbw_gbps for r in report.ranks)
    assert [f.code for f in report.findings] == ["below_floor"]
    assert "rank 0/2 on " in err and "rank 1/2 on " in err
