"""Benchmark `sglx-serve --list-profiles` and `--dry-run`: they must answer in seconds, without
importing torch or sglang.

    .venv/bin/python bench/image/bench_explain.py [--image REF | --host] [--arch cpu] [--runs 5]
                                                  [--json] [--out FILE]

Each command runs `--runs` times (alternated), and the table gives the median and the fastest
wall seconds and the ratio of the medians to the baseline's (the bare interpreter is shown too).
The baseline is `sglx-serve --version`, which loads the baked profile and says which sglx-serve
it is: what any answer of sglx-serve costs at least (the entrypoint's interpreter importing its
module alone is shown too). Target: at most 3 s each in the cpu image.

- `--image REF` (default: sglx/ARCH:latest when the engine has it): `docker run --rm
  --network none REF --dry-run`, the image's own profile, model and devices; the baseline is
  the same `docker run` with the entrypoint's python importing the module.
- `--host` (or no image): the host venv's `sglx-serve`, with SGLX_PROFILE the arch profile
  resolved as an image bakes it and SGLX_MODEL a demo model (`--model DIR`, else one is made).
  Host numbers are not the image's: the in-image numbers need a built image.

Then each command runs once more under a probe (the same `main()`, in the same interpreter, its
output discarded) that lists the heavy packages in `sys.modules` afterwards; the bench fails (exit
1) when torch or sglang is among them. It never builds an image.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any

REPO = Path(__file__).resolve().parents[2]
IMAGE_PYTHON = "/opt/sglx/venv/bin/python"
TARGET_S = 3.0
FORBIDDEN = ("torch", "sglang")
# Reported when present, not refused: heavy, and never needed to answer.
WATCHED = (*FORBIDDEN, "transformers", "numpy", "triton", "safetensors")
IMPORT_ONLY = "import sglx_runtime.serve"
BASELINE = "sglx-serve --version"
COMMANDS = {"--list-profiles": ["--list-profiles"], "--dry-run": ["--dry-run"]}
# Runs main() as the entrypoint does, then says what it imported (stdout: one JSON line).
PROBE = f"""
import contextlib, io, json, sys
from sglx_runtime import serve
with contextlib.redirect_stdout(io.StringIO()):
    code = serve.main(sys.argv[1:])
watched = {WATCHED!r}
found = sorted({{m.split(".")[0] for m in sys.modules}} & set(watched))
print(json.dumps({{"exit": code, "modules": len(sys.modules), "imported": found}}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="cpu")
    parser.add_argument("--image", help="image to run (default sglx/ARCH:latest when present)")
    parser.add_argument("--host", action="store_true", help="run on the host venv instead")
    parser.add_argument("--model", type=Path, help="model folder for --host (default: a demo)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--out", type=Path, help="also write the JSON results to this file")
    args = parser.parse_args()

    image = None if args.host else (args.image or _present(f"sglx/{args.arch}:latest"))
    with tempfile.TemporaryDirectory(prefix="sglx-bench-explain-") as scratch:
        if image is None:
            if not args.host:
                print(
                    f"no sglx/{args.arch}:latest image in the engine: measuring the host venv "
                    "(the in-image numbers need a built image)",
                    file=sys.stderr,
                )
            where = "host venv"
            run, env = _host(args.arch, args.model, Path(scratch))
        else:
            where = f"image {image}"
            run, env = _in_image(image), None
        results = _measure(run, env, args.runs)
    results.update(
        where=where,
        arch=args.arch,
        host=platform.node(),
        cpus=os.cpu_count() or 0,
        runs=args.runs,
        baseline=BASELINE,
        target_s=TARGET_S,
    )
    failed = [name for name, probe in results["imports"].items() if probe["forbidden"]]
    failed += [name for name, probe in results["imports"].items() if probe["exit"] != 0]
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        _print_table(results)
    if failed:
        print(f"FAILED: {', '.join(sorted(set(failed)))}", file=sys.stderr)
        return 1
    return 0


def _present(tag: str) -> str | None:
    found = subprocess.run(
        ["docker", "image", "inspect", tag], capture_output=True, check=False, timeout=60
    )
    return tag if found.returncode == 0 else None


class _Runner:
    """argv for one command: the entrypoint with `flags`, or its python with `-c CODE flags`."""

    def __init__(self, entrypoint: list[str], python: list[str]) -> None:
        self.entrypoint = entrypoint
        self.python = python

    def serve(self, flags: list[str]) -> list[str]:
        return [*self.entrypoint, *flags]

    def code(self, code: str, flags: list[str]) -> list[str]:
        return [*self.python, "-c", code, *flags]


def _in_image(image: str) -> _Runner:
    docker = ["docker", "run", "--rm", "--network", "none"]
    return _Runner([*docker, image], [*docker, "--entrypoint", IMAGE_PYTHON, image])


def _host(arch: str, model: Path | None, scratch: Path) -> tuple[_Runner, dict[str, str]]:
    from sglx_core.profile import load_profile
    from sglx_core.profile.resolved import resolved_text

    baked = scratch / "arch.yaml"
    baked.write_text(resolved_text(load_profile(arch)))
    if model is None:
        from sglx.demo_model import make_demo_model

        model = make_demo_model(scratch / "demo")
    env = {**os.environ, "SGLX_PROFILE": str(baked), "SGLX_MODEL": str(model)}
    bin_dir = Path(sys.executable).parent
    return _Runner([str(bin_dir / "sglx-serve")], [sys.executable]), env


def _measure(run: _Runner, env: dict[str, str] | None, runs: int) -> dict[str, Any]:
    argvs = {
        "python (bare)": run.code("pass", []),
        "import only": run.code(IMPORT_ONLY, []),
        "baseline": run.serve(["--version"]),
    }
    argvs |= {name: run.serve(flags) for name, flags in COMMANDS.items()}
    times: dict[str, list[float]] = {name: [] for name in argvs}
    for _ in range(runs):
        for name, argv in argvs.items():  # alternated: the machine's load falls on all alike
            started = time.perf_counter()
            done = subprocess.run(argv, env=env, capture_output=True, check=False, timeout=300)
            times[name].append(time.perf_counter() - started)
            if done.returncode != 0:
                raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr!r}")
    medians = {name: median(values) for name, values in times.items()}
    fastest = {name: min(values) for name, values in times.items()}
    imports = {}
    for name, flags in COMMANDS.items():
        probed = subprocess.run(
            run.code(PROBE, flags), env=env, capture_output=True, text=True, check=False
        )
        try:
            probe = json.loads(probed.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            raise SystemExit(f"the import probe of {name} failed:\n{probed.stderr}") from None
        probe["forbidden"] = [m for m in probe["imported"] if m in FORBIDDEN]
        imports[name] = probe
    return {
        "runs_s": times,
        "median_s": medians,
        "min_s": fastest,
        "ratio_to_baseline": {name: medians[name] / medians["baseline"] for name in medians},
        "imports": imports,
    }


def _print_table(r: dict[str, Any]) -> None:
    print(f"sglx-serve explain bench: {r['where']}, arch {r['arch']}, {r['cpus']} cpus")
    head = f"{'command':<16}  {'median (s)':>10}  {'min (s)':>7}  {'ratio':>6}  target"
    print(f"  {head}  imported (watched)")
    for name, seconds in r["median_s"].items():
        row = f"{name:<16}  {seconds:>10.2f}  {r['min_s'][name]:>7.2f}"
        row += f"  {r['ratio_to_baseline'][name]:>6.2f}"
        if name not in r["imports"]:
            what = {"baseline": r["baseline"], "import only": f'python -c "{IMPORT_ONLY}"'}.get(
                name, "the interpreter alone"
            )
            print(f"  {row}          {what}")
            continue
        ok = "yes" if seconds <= r["target_s"] else "NO"
        imported = ", ".join(r["imports"][name]["imported"]) or "none"
        print(f"  {row}  {ok:<6}  {imported}")
    for name, probe in r["imports"].items():
        verdict = "imports " + ", ".join(probe["forbidden"]) if probe["forbidden"] else "ok"
        print(
            f"  {name}: exit {probe['exit']}, {probe['modules']} modules, torch/sglang: {verdict}"
        )


if __name__ == "__main__":
    sys.exit(main())
