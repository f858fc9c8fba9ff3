"""A serving group that spans hosts, on the cpu platform: two containers from the cpu image on
the host network stand in for two hosts (`--tp 2 --nnodes 2`, sglang's own multi-node tensor
parallelism over gloo on 127.0.0.1, and `--pp-size 2 --nnodes 2`, a pipeline stage a node).

- The group serves a completion whose greedy tokens equal the single-rank server's. The cpu
  profile keeps float32 weights; a two-way all-reduce of float32 partial sums can still round
  differently from one rank's sum, so should a token ever differ the test compares the top
  logprobs instead (see `_same_greedy_tokens`).
- Different per-node core bindings and per-launch run ids start fine (the profile's
  ranks.per_node_env); one node with another --max-running-requests fails both nodes within
  60 s, naming the key and which rank on which host holds which value.

Every node gets the same --random-seed: sglang draws one per launch when none is given, and the
rank check then refuses the group (nodes sampling with different seeds would feed different
tokens to one tensor-parallel step).
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docker.errors import DockerException
from helpers.engine_fixtures import SGLX, free_port
from helpers.server import http, wait_healthy

pytestmark = [pytest.mark.docker, pytest.mark.slow]

PROMPT = {"model": "demo", "prompt": "The capital of France is", "max_tokens": 6,
          "temperature": 0, "logprobs": 3}  # fmt: skip


@contextlib.contextmanager
def servers(
    docker: Any, image: str, nodes: list[tuple[list[str], dict[str, str]]], name: str
) -> Iterator[list[Any]]:
    started = []
    try:
        for index, (args, env) in enumerate(nodes):
            started.append(docker.containers.run(
                image, args, detach=True, network_mode="host", shm_size="1g", environment=env,
                name=f"{name}-{index}",
            ))  # fmt: skip
        yield started
    finally:
        for container in started:
            with contextlib.suppress(Exception):
                # Shown by pytest when the test fails: each node's last words.
                log = container.logs().decode(errors="replace")
                print(f"--- {container.name}\n{log[-30000:]}")
            with contextlib.suppress(Exception):
                container.remove(force=True)


@contextlib.contextmanager
def serving(
    docker: Any, image: str, nodes: list[tuple[list[str], dict[str, str]]], name: str, port: int
) -> Iterator[list[Any]]:
    """`servers`, once rank 0 answers /health on `port` while every node runs."""
    with servers(docker, image, nodes, name) as started:
        wait_healthy(
            f"http://127.0.0.1:{port}",
            timeout=600,
            alive=lambda: all(docker.containers.get(c.id).status == "running" for c in started),
        )
        yield started


def _completion(port: int) -> dict[str, Any]:
    status, body = http(f"http://127.0.0.1:{port}/v1/completions", PROMPT, timeout=300)
    assert status == 200, body
    return dict(body["choices"][0])


def _same_greedy_tokens(single: dict[str, Any], group: dict[str, Any]) -> None:
    if single["text"] == group["text"]:
        return
    # float32 sums in another order: the greedy token at each step must still be among the
    # group's top 3 with a logprob within 1e-3 of the single rank's.
    for one, two in zip(
        single["logprobs"]["top_logprobs"], group["logprobs"]["top_logprobs"], strict=False
    ):
        best = max(one, key=one.get)
        assert best in two and abs(one[best] - two[best]) < 1e-3, (single, group)


def _group(
    port: int,
    dist: int,
    extra: list[list[str]],
    binds: list[str],
    split: tuple[str, ...] = ("--tp", "2"),
) -> list[tuple[list[str], dict[str, str]]]:
    return [
        ([*split, "--nnodes", "2", "--node-rank", str(rank), "--dist-init-addr",
          f"127.0.0.1:{dist}", "--port", str(port + rank), "--random-seed", "7", *extra[rank]],
         {"SGLANG_CPU_OMP_THREADS_BIND": binds[rank]})
        for rank in (0, 1)
    ]  # fmt: skip


@pytest.fixture(scope="module")
def reference(docker: Any, cpu_image: dict[str, Any], run_id: str) -> dict[str, Any]:
    """The single-rank server's completion, which every group must serve."""
    port = free_port()
    single = [(["--port", str(port)], {})]
    with serving(docker, cpu_image["tag"], single, f"sglx-test-{run_id}-single", port):
        return _completion(port)


def test_two_pipeline_stages_on_two_nodes_serve_the_single_rank_tokens(
    docker: Any, cpu_image: dict[str, Any], run_id: str, reference: dict[str, Any]
) -> None:
    """Seed S0-25's fix where GPUs share no fast link, and S4-81's pipeline parallelism: one
    stage on each node (`--pp-size 2 --nnodes 2`, the demo model's two layers one a node). The
    group serves the single rank's greedy tokens; each node's sglx-serve sized its devices by
    its stage (the capacity line names the split), and the plugin's rank check formed the
    group."""
    port, dist = free_port(), free_port()
    nodes = _group(port, dist, [[], []], ["0", "1"], split=("--pp-size", "2"))
    with serving(docker, cpu_image["tag"], nodes, f"sglx-test-{run_id}-stages", port) as group:
        _same_greedy_tokens(reference, _completion(port))
        logs = [c.logs().decode(errors="replace") for c in group]
    for log in logs:
        assert "At --tp 1 --pp-size 2 (the largest stage holds 1 of 2 layers), each " in log, log
    assert "2 ranks agree on their configuration" in logs[1], logs[1]


def test_two_nodes_serve_the_single_rank_tokens(
    docker: Any, cpu_image: dict[str, Any], run_id: str, tmp_path: Path, reference: dict[str, Any]
) -> None:
    port, dist = free_port(), free_port()
    # Per-node bindings differ (core 0 and core 1), and so do the run ids sglang generates.
    nodes = _group(port, dist, [[], []], ["0", "1"])
    with serving(docker, cpu_image["tag"], nodes, f"sglx-test-{run_id}-group", port) as group:
        _same_greedy_tokens(reference, _completion(port))
        # Seed S0-36 on a real trace: rank 0 profiled through sglang's own /start_profile
        # (docs/reference/profiling.md) while it serves, its trace read by `sglx trace
        # comm-share`: the group's all-reduces are gloo's, on the host side of the trace.
        trace = _profiled_trace(port, group[0], tmp_path)
        done = subprocess.run([SGLX, "trace", "comm-share", str(trace), "--arch", "cpu", "--json"],
                              capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
        code, out = done.returncode, json.loads(done.stdout)
        (share,) = out["data"]["traces"]
        assert share["side"] == "host" and 0 < share["comm_ms"] <= share["busy_ms"], share
        assert any(t["name"].startswith(("gloo:", "c10d::")) for t in share["top"]), share
        assert code == (1 if share["share"] > out["data"]["max_share"] else 0), out


def _profiled_trace(port: int, node: Any, tmp_path: Path) -> Path:
    """Three profiled steps of a completion on `node`, its trace copied out of the container."""
    folder = "/tmp/sglx-profile"
    body = {"output_dir": folder, "num_steps": 3, "activities": ["CPU"], "profile_prefix": "comm"}
    status, answer = http(f"http://127.0.0.1:{port}/start_profile", body)
    assert status == 200, answer
    _completion(port)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        time.sleep(1)
        try:
            stream, _ = node.get_archive(folder)
            with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
                for member in tar:
                    if member.isfile() and member.name.endswith(".trace.json.gz"):
                        data = tar.extractfile(member).read()  # type: ignore[union-attr]
                        gzip.decompress(data)  # whole once it reads back
                        (tmp_path / "rank0.trace.json.gz").write_bytes(data)
                        return tmp_path / "rank0.trace.json.gz"
        except (OSError, EOFError, tarfile.TarError, DockerException):
            continue
    raise AssertionError(f"no trace in {folder} of {node.name} after 120 s")


def test_a_node_with_another_flag_fails_both_nodes_naming_it(
    docker: Any, cpu_image: dict[str, Any], run_id: str
) -> None:
    port, dist = free_port(), free_port()
    nodes = _group(port, dist, [[], ["--max-running-requests", "7"]], ["0", "1"])
    with servers(docker, cpu_image["tag"], nodes, f"sglx-test-{run_id}-odd") as group:
        started = time.monotonic()
        codes = [c.wait(timeout=240)["StatusCode"] for c in group]
        logs = [c.logs().decode(errors="replace") for c in group]
    assert all(code != 0 for code in codes), logs
    # Both stop once they compared: within 60 s of the check (the start before it is slower).
    assert time.monotonic() - started < 240
    for log in logs:
        assert "ranks disagree on their configuration" in log
        assert "arg:max_running_requests differs (rank 0 on " in log
        assert ": 7)" in log
