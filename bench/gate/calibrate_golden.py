"""Calibrate the golden-numerics tolerances: served log-probabilities against the float32
transformers reference, on a real sglang server on CPU.

    .venv/bin/python bench/gate/calibrate_golden.py [--model DIR] [--variants a,b] [--json]
        [--out FILE]

Makes the sglx demo model (float32) unless --model is given, builds its golden file
(sglx.gate.golden_build), then for each variant starts `python -m sglang.launch_server` from this
venv on 127.0.0.1 with the sglx platform and the cpu profile (as tests/integration/
test_cpu_server.py does), replays the golden file (sglx_runtime.golden_replay) and records the
top-1 agreement and the mean and max |served - reference| overall and per prompt. Variants:

- float32: `--dtype float32`, the reference precision: what is left is kernel order;
- auto: sglang's default `--dtype auto`, which serves a float32 checkpoint in float16;
- bfloat16: `--dtype bfloat16`;
- rope: float32 with rope_theta 1000 instead of 10000 (`--json-model-override-args` on
  `rope_parameters`), a wrong model setting the tolerance must catch;
- rope-float16, rope-bfloat16: the same wrong rope_theta served in float16 and bfloat16;
- rope-v4-key: the same through the transformers-4 key `{"rope_theta": 1000}`, which sglang
  0.5.23 ignores when the config has `rope_parameters` (transformers 5 writes it): no change;
- eps: float32 with rms_norm_eps 1e-3 instead of 1e-6, a subtler wrong setting.

`--sharpen K` multiplies the demo model's lm_head by K: the random demo model's next-token
distribution is nearly flat (log-probabilities about -5 over 384 tokens), a trained model's is
peaked, and rounding errors in log-probabilities grow with the logits' size.

Each variant is also judged by the cpu profile's own tolerance for its served dtype
(images/cpu/arch.yaml, gate.numerics). A measurement, not a test: the results are in
bench/gate/results/golden-calibration-cpu-*.json, quoted in docs/reference/gate.md.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

VARIANTS: dict[str, tuple[str, ...]] = {
    "float32": ("--dtype", "float32"),
    "auto": (),
    "bfloat16": ("--dtype", "bfloat16"),
    "rope": (
        "--dtype",
        "float32",
        "--json-model-override-args",
        '{"rope_parameters": {"rope_theta": 1000.0, "rope_type": "default"}}',
    ),
    "rope-float16": (
        "--json-model-override-args",
        '{"rope_parameters": {"rope_theta": 1000.0, "rope_type": "default"}}',
    ),
    "rope-bfloat16": (
        "--dtype",
        "bfloat16",
        "--json-model-override-args",
        '{"rope_parameters": {"rope_theta": 1000.0, "rope_type": "default"}}',
    ),
    "rope-v4-key": ("--dtype", "float32", "--json-model-override-args", '{"rope_theta": 1000}'),
    "eps": ("--dtype", "float32", "--json-model-override-args", '{"rms_norm_eps": 1e-3}'),
}
REPORT_ONLY = (1e9, 1e9, 0.0)  # tolerances that pass everything: the numbers are measured


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="a model folder (default: the demo model)")
    parser.add_argument("--layers", type=int, default=2, help="the demo model's layers")
    parser.add_argument("--sharpen", type=float, default=1.0, help="scale the demo lm_head")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", type=Path, help="also write the JSON results here")
    args = parser.parse_args()

    import sglang
    import torch
    import transformers

    from sglx.gate.golden_build import build_golden_file
    from sglx_core.gate.golden import Tolerance, compare, load_golden
    from sglx_runtime.golden_replay import fetch_served

    results: dict[str, Any] = {
        "versions": {
            "sglang": sglang.__version__,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
        },
        "cores": os.cpu_count(),
        "variants": {},
    }
    with tempfile.TemporaryDirectory(prefix="sglx-golden-cal-") as tmp:
        work = Path(tmp)
        model = args.model
        if model is None:
            from sglx.demo_model import ModelShape, make_demo_model

            model = make_demo_model(work / "demo", shape=ModelShape(num_hidden_layers=args.layers))
            if args.sharpen != 1.0:
                _sharpen(model, args.sharpen)
        golden_path = work / "golden.json"
        started = time.monotonic()
        results["golden_digest"] = build_golden_file(model, golden_path)
        results["golden_build_s"] = round(time.monotonic() - started, 1)
        golden = load_golden(golden_path)
        demo = f"demo ({args.layers} layers, lm_head x{args.sharpen:g})"
        results["model"] = golden.model if args.model else demo
        logprobs = [lp for p in golden.prompts for lp in p.logprobs]
        results["reference_logprob_mean"] = sum(logprobs) / len(logprobs)
        results["tokens"] = sum(len(p.continuation_ids) for p in golden.prompts)
        profile = bake_cpu_profile(work / "arch.yaml")
        for name in args.variants.split(","):
            log = work / f"server-{name}.log"
            print(f"  {name}: starting the server", file=sys.stderr, flush=True)
            with Server(model, profile, VARIANTS[name], log) as (base, ready_s):
                served = fetch_served(golden, base)
            report = compare(golden, served, Tolerance(*REPORT_ONLY))
            dtype = _served_dtype(model, VARIANTS[name])
            judged = compare(golden, served, _profile_tolerance(dtype))
            results["variants"][name] = {
                "args": list(VARIANTS[name]),
                "ready_s": round(ready_s, 1),
                "served_dtype": dtype,
                **report.to_json(),
                "profile": {"passed": judged.passed, "findings": list(judged.findings())},
            }
            print(
                f"  {name}: top-1 {report.top1_agreement:.3f}, mean |Δ| {report.mean_abs:.3g}, "
                f"max |Δ| {report.max_abs:.3g}",
                file=sys.stderr,
                flush=True,
            )
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"golden calibration: {results['model']}, {results['tokens']} tokens, versions "
          f"{results['versions']}")  # fmt: skip
    print(f"{'variant':<14} {'dtype':<9} {'top-1':>6} {'worst':>6} {'mean |Δ|':>9} "
          f"{'max |Δ|':>9}  cpu profile's tolerance")  # fmt: skip
    for name, row in results["variants"].items():
        worst = min(p["top1_agreement"] for p in row["prompts"])
        verdict = "pass" if row["profile"]["passed"] else "FAIL"
        print(f"{name:<14} {row['served_dtype']:<9} {row['top1_agreement']:>6.3f} {worst:>6.3f} "
              f"{row['mean_abs']:>9.3g} {row['max_abs']:>9.3g}  {verdict}")  # fmt: skip
    return 0


def _sharpen(model: Path, factor: float) -> None:
    """Multiply the lm_head weights of the safetensors file in `model` by `factor`."""
    from safetensors.torch import load_file, save_file

    path = model / "model.safetensors"
    tensors = load_file(path)
    tensors["lm_head.weight"] = tensors["lm_head.weight"] * factor
    save_file(tensors, path, metadata={"format": "pt"})


def _profile_tolerance(dtype: str) -> Any:
    """The cpu profile's gate.numerics tolerance for `dtype` (images/cpu/arch.yaml)."""
    from sglx_core.profile import load_profile
    from sglx_runtime.golden_replay import profile_tolerance

    return profile_tolerance(dtype, load_profile("cpu"))


def bake_cpu_profile(dst: Path) -> Path:
    """The resolved cpu profile as a file, the way the image bakes /etc/sglx/arch.yaml."""
    from sglx_core.profile import load_profile

    dst.write_text(yaml.safe_dump(load_profile("cpu").to_json(), sort_keys=False))
    return dst


def _served_dtype(model: Path, extra: tuple[str, ...]) -> str:
    """The dtype sglang serves `model` in with the flags `extra`, by sglang's own rule
    (`--dtype auto` serves a float32 checkpoint in float16)."""
    from sglang.srt.configs.model_config import _get_and_verify_dtype
    from transformers import AutoConfig

    dtype = extra[extra.index("--dtype") + 1] if "--dtype" in extra else "auto"
    config = AutoConfig.from_pretrained(model, local_files_only=True)
    return str(_get_and_verify_dtype(config, dtype)).removeprefix("torch.")


class Server:
    """`python -m sglang.launch_server` on a free port; the whole group stopped on exit."""

    def __init__(self, model: Path, profile: Path, extra: tuple[str, ...], log: Path) -> None:
        self.model, self.profile, self.extra, self.log = model, profile, extra, log

    def __enter__(self) -> tuple[str, float]:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        env = {
            **os.environ,
            "SGLANG_PLATFORM": "sglx",
            "SGLX_PROFILE": str(self.profile),
            "HF_HUB_OFFLINE": "1",
            "TORCHDYNAMO_DISABLE": "1",
        }
        argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", str(self.model),
                "--host", "127.0.0.1", "--port", str(port), "--log-level", "info",
                *self.extra]  # fmt: skip
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(
                argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        base = f"http://127.0.0.1:{port}"
        started = time.monotonic()
        while time.monotonic() - started < 600:
            if self.proc.poll() is not None:
                self._stop()
                raise RuntimeError(f"the server exited:\n{self.log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=5) as response:
                    if response.status == 200:
                        return base, time.monotonic() - started
            except OSError:
                pass
            time.sleep(1)
        self._stop()
        raise TimeoutError(f"{base}/health did not answer within 600 s")

    def __exit__(self, *exc: object) -> None:
        self._stop()

    def _stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


if __name__ == "__main__":
    sys.exit(main())
