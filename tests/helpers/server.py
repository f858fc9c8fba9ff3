"""Run and talk to a real SGLang server (in a process here, or in a container)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def http(url: str, body: dict[str, Any] | None = None, timeout: float = 60) -> tuple[int, Any]:
    """GET (or POST `body` as JSON); returns (status, parsed JSON or text)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read().decode()
            status = response.status
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    try:
        return status, json.loads(raw)
    except json.JSONDecodeError:
        return status, raw


def wait_healthy(base: str, timeout: float, alive: Any = None) -> float:
    """Seconds until GET /health answers 200; `alive()` False aborts early."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if alive is not None and not alive():
            raise RuntimeError("the server exited before it became healthy")
        try:
            if http(f"{base}/health", timeout=5)[0] == 200:
                return time.monotonic() - started
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(1)
    raise TimeoutError(f"{base}/health did not answer 200 within {timeout:.0f} s")


@contextmanager
def sglang_server(
    model: Path, port: int, env: dict[str, str], log: Path, *extra: str
) -> Iterator[str]:
    """`python -m sglang.launch_server` on 127.0.0.1:`port`; stopped (whole group) on exit."""
    argv = [
        sys.executable,
        "-m",
        "sglang.launch_server",
        "--model-path",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *extra,
    ]
    with log.open("w") as out:
        proc = subprocess.Popen(
            argv,
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, timeout=600, alive=lambda: proc.poll() is None)
        yield base
    except BaseException:
        sys.stderr.write(log.read_text()[-5000:])
        raise
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def transformers_greedy(model: Path, prompts: list[str], max_new_tokens: int) -> list[list[int]]:
    """Greedy continuation token ids from transformers' generate on CPU, the reference."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    lm = AutoModelForCausalLM.from_pretrained(model, torch_dtype=torch.float32).eval()
    outputs = []
    for prompt in prompts:
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        with torch.no_grad():
            out = lm.generate(ids, max_new_tokens=max_new_tokens, do_sample=False)
        outputs.append(out[0, ids.shape[1] :].tolist())
    return outputs
