"""The cpu platform serves a real SGLang server whose greedy output equals transformers'."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.profiles import bake
from helpers.server import http, sglang_server, transformers_greedy

pytestmark = pytest.mark.slow

PROMPTS = ["Hello, world!", "The quick brown fox", "Kernels, weights and wheels"]
NEW_TOKENS = 16


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, Path]]:
    from sglx.demo_model import make_demo_model

    work = tmp_path_factory.mktemp("cpu-server")
    model = make_demo_model(work / "demo")
    profile = bake("cpu", work / "arch.yaml")
    profile_dir = work / "fallbacks"
    env = {
        "SGLANG_PLATFORM": "sglx",
        "SGLX_PROFILE": str(profile),
        "SGLX_PROFILE_FALLBACKS": "1",
        "SGLX_PROFILE_FALLBACKS_DIR": str(profile_dir),
        "HF_HUB_OFFLINE": "1",
    }
    with sglang_server(model, free_port(), env, work / "server.log") as base:
        yield base, model, profile_dir


def test_health_and_models(served: tuple[str, Path, Path]) -> None:
    base, model, _ = served
    assert http(f"{base}/health")[0] == 200
    status, listing = http(f"{base}/v1/models")
    assert status == 200
    assert [m["id"] for m in listing["data"]] == [str(model)]


def test_greedy_completions_match_transformers_token_for_token(
    served: tuple[str, Path, Path],
) -> None:
    from transformers import AutoTokenizer

    base, model, _ = served
    tokenizer = AutoTokenizer.from_pretrained(model)
    expected = transformers_greedy(model, PROMPTS, NEW_TOKENS)
    for prompt, want in zip(PROMPTS, expected, strict=True):
        status, body = http(
            f"{base}/v1/completions",
            {
                "model": str(model),
                "prompt": prompt,
                "max_tokens": NEW_TOKENS,
                "temperature": 0,
            },
        )
        assert status == 200, body
        assert body["choices"][0]["text"] == tokenizer.decode(want, skip_special_tokens=True)
        ids = tokenizer(prompt).input_ids
        status, body = http(
            f"{base}/generate",
            {
                "input_ids": ids,
                "sampling_params": {"max_new_tokens": NEW_TOKENS, "temperature": 0},
            },
        )
        assert status == 200, body
        assert body["output_ids"] == want


def test_fallback_profile_reports_which_implementation_ran(
    served: tuple[str, Path, Path],
) -> None:
    base, model, profile_dir = served
    http(f"{base}/v1/completions", {"model": str(model), "prompt": "warm", "max_tokens": 4})
    deadline = time.monotonic() + 30
    reports: list[dict] = []
    while time.monotonic() < deadline and not any(r.get("ops") for r in reports):
        time.sleep(2.5)  # the profiler refreshes its file every 2 s while ops run
        http(f"{base}/v1/completions", {"model": str(model), "prompt": "again", "max_tokens": 4})
        reports = [json.loads(p.read_text()) for p in profile_dir.glob("fallbacks-*.json")]
    ops = {(row["op"], row["impl"]) for r in reports for row in r["ops"]}
    # sglx kernels serve these ops on cpu through their torch paths: reported as fallbacks
    assert {op for op, _ in ops} >= {"RMSNorm", "SiluAndMul", "RotaryEmbedding"}
    assert all(
        impl in {"composite", "native"}
        for op, impl in ops
        if op in {"RMSNorm", "SiluAndMul", "RotaryEmbedding"}
    )
    assert any(r["flagged"] for r in reports)


def test_a_served_request_is_profiled_through_sglangs_own_endpoints(
    served: tuple[str, Path, Path], tmp_path: Path
) -> None:
    """docs/reference/profiling.md's procedure, as it runs on the cpu reference: POST
    /start_profile with an output folder and a step count, send the request, and sglang's torch
    profiler writes a trace of those steps there and stops by itself."""
    import gzip

    base, model, _ = served
    folder = tmp_path / "profiles"
    folder.mkdir()
    body = {"output_dir": str(folder), "num_steps": 3, "activities": ["CPU"],
            "profile_prefix": "sglx-doc"}  # fmt: skip
    status, _ = http(f"{base}/start_profile", body)
    assert status == 200
    http(f"{base}/v1/completions", {"model": str(model), "prompt": "profile", "max_tokens": 8})
    deadline = time.monotonic() + 60
    events: list[dict] = []
    while time.monotonic() < deadline and not events:
        time.sleep(1)
        try:  # the trace is whole once it reads back (the scheduler writes it in place)
            (trace,) = folder.glob("sglx-doc*.trace.json.gz")
            events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
        except (ValueError, OSError, EOFError):
            continue
    assert any(e.get("cat") == "cpu_op" for e in events), (len(events), list(folder.iterdir()))
