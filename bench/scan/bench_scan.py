"""Benchmark `sglx scan` against an `ldd` loop and pax-utils' `lddtree` on the same tree.

    .venv/bin/python bench/scan/bench_scan.py [--tree PATH ...] [--json] [--out DIR]

For each scenario (default: /usr/lib + /usr/bin, and this venv's site-packages; or the --tree
paths), on the same ELF files, resolved against this machine's root:
- ldd loop: `ldd` on every ELF file, one loader process per file, sequentially (what
  `find TREE -type f -exec ldd {} \\;` does, but given the ELF list: finding the ELF files is not
  timed for the baselines, which favours them);
- lddtree: pax-utils' lddtree (a Python script, run with this venv's pyelftools) over all ELF
  files in one process;
- sglx scan: the CLI, `sglx scan --root / TREE... --json -q`, timed end to end including the walk
  over every file, with --jobs 1 and with every CPU (median of --repeat runs).
It prints the times, the ratios, and for every (file, name) ldd lists, how many each tool resolves
to the same file as ldd (ldd runs the real loader, so it is the reference), plus the first
disagreements. Needs `ldd` (libc-bin) and `lddtree` (apt-get install pax-utils); a missing
baseline is reported as skipped. Tests never assert timings; this script is where they live.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

from sglx.scan.analysis import analyze
from sglx.scan.command import tree_target
from sglx.scan.elf import has_elf_magic
from sglx.scan.rules import Rules

REPO = Path(__file__).resolve().parents[2]

INTERPRETERS = {"ld-linux-x86-64.so.2", "ld-linux.so.2", "ld-linux-aarch64.so.1"}
LDD_LINE = re.compile(r"^\s+(\S+) => (not found|\S+)")
LDDTREE_LINE = re.compile(r"^\s+(\S+) => (\S+)$")
CLEAN_ENV = {"PATH": "/usr/bin:/bin", "LC_ALL": "C"}
Resolutions = dict[str, dict[str, str | None]]  # file -> name -> real path or None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", type=Path, help="a tree (repeat for more)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--out", type=Path, help="also write <out>/<name>.json and .md")
    parser.add_argument("--name", default="cpu-2core", help="result file name (default cpu-2core)")
    parser.add_argument("--repeat", type=int, default=3, help="sglx runs per setting (median)")
    parser.add_argument(
        "--find-all",
        action="store_true",
        help="also time the literal `find TREE -type f -exec ldd {} +` over every file (slow)",
    )
    args = parser.parse_args()

    if args.tree:
        scenarios = {"custom": [p.resolve() for p in args.tree]}
    else:
        site = Path(sysconfig.get_paths()["platlib"])
        scenarios = {"usr": [Path("/usr/lib"), Path("/usr/bin")], "site-packages": [site]}
    results = {
        "machine": machine(),
        "scenarios": [
            run_scenario(name, trees, args.repeat, args.find_all)
            for name, trees in scenarios.items()
        ],
    }
    text = render(results)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"{args.name}.json").write_text(json.dumps(results, indent=2) + "\n")
        (args.out / f"{args.name}.md").write_text(text)
    print(json.dumps(results, indent=2) if args.json else text, end="" if not args.json else "\n")
    return 0


def machine() -> dict[str, Any]:
    lddtree = shutil.which("lddtree")
    return {
        "cpus": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "glibc": " ".join(platform.libc_ver()),
        "lddtree": lddtree,
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def run_scenario(name: str, trees: list[Path], repeat: int, find_all: bool) -> dict[str, Any]:
    log(f"[{name}] finding ELF files under {', '.join(map(str, trees))} (not timed)")
    elves = elf_files(trees)
    log(f"[{name}] {len(elves)} ELF files; warming the page cache with one sglx run")
    sglx_cli(trees, jobs=1)
    out: dict[str, Any] = {"name": name, "trees": [str(t) for t in trees], "elf_files": len(elves)}

    log(f"[{name}] ldd loop over {len(elves)} files")
    started = time.monotonic()
    ldd_out = ldd_loop(elves)
    out["ldd_seconds"] = round(time.monotonic() - started, 2)

    if find_all:
        log(f"[{name}] find -type f -exec ldd {{}} + over every file")
        started = time.monotonic()
        subprocess.run(
            ["find", *map(str, trees), "-type", "f", "-exec", "ldd", "{}", "+"],
            capture_output=True,
            env=CLEAN_ENV,
            check=False,
        )
        out["find_exec_ldd_seconds"] = round(time.monotonic() - started, 2)

    lddtree_out: Resolutions | None = None
    if shutil.which("lddtree"):
        log(f"[{name}] lddtree over {len(elves)} files in one process")
        started = time.monotonic()
        lddtree_out, crashed = lddtree(elves)
        out["lddtree_seconds"] = round(time.monotonic() - started, 2)
        out["lddtree_crashed_on"] = crashed
    else:
        out["lddtree_seconds"] = None
        log(f"[{name}] lddtree not installed (apt-get install pax-utils): skipped")

    cpus = len(os.sched_getaffinity(0))
    for jobs in sorted({1, cpus}):
        times = []
        for _ in range(repeat):
            started = time.monotonic()
            sglx_cli(trees, jobs=jobs)
            times.append(time.monotonic() - started)
        out[f"sglx_jobs{jobs}_seconds"] = round(statistics.median(times), 2)
        log(f"[{name}] sglx scan --jobs {jobs}: {out[f'sglx_jobs{jobs}_seconds']} s (median)")
    out["sglx_seconds"] = out[f"sglx_jobs{cpus}_seconds"]
    out["ldd_over_sglx"] = round(out["ldd_seconds"] / out["sglx_seconds"], 1)
    if out["lddtree_seconds"] is not None:
        out["lddtree_over_sglx"] = round(out["lddtree_seconds"] / out["sglx_seconds"], 1)
    if "find_exec_ldd_seconds" in out:
        out["find_exec_ldd_over_sglx"] = round(
            out["find_exec_ldd_seconds"] / out["sglx_seconds"], 1
        )

    ours = sglx_resolutions(trees)
    out["agreement"] = agreement(ldd_out, {"sglx": ours, "lddtree": lddtree_out})
    return out


def log(message: str) -> None:
    sys.stderr.write(f"bench_scan: {message}\n")
    sys.stderr.flush()


def elf_files(trees: list[Path]) -> list[str]:
    found = []
    for tree in trees:
        for folder, _, names in os.walk(tree):
            for name in names:
                path = Path(folder) / name
                if not path.is_symlink() and path.is_file() and has_elf_magic(str(path)):
                    found.append(str(path))
    return found


def ldd_loop(files: list[str]) -> Resolutions:
    """ldd per file: xargs hands ldd 64 paths at a time; ldd runs the loader once per path."""
    done = subprocess.run(
        ["xargs", "-0", "-n", "64", "ldd"],
        input="\0".join(files),
        capture_output=True,
        text=True,
        env=CLEAN_ENV,
        check=False,
    )
    out: Resolutions = {}
    current: dict[str, str | None] | None = None
    for line in done.stdout.splitlines():
        if not line.startswith(("\t", " ")) and line.endswith(":"):
            current = out.setdefault(line[:-1], {})
            continue
        match = LDD_LINE.match(line)
        if match and current is not None:
            found = match.group(2)
            current.setdefault(
                match.group(1), None if found == "not found" else os.path.realpath(found)
            )
    for line in done.stderr.splitlines():  # "FILE: not a dynamic executable" etc.
        out.pop(line.split(":", 1)[0], None)
    return out


def lddtree(files: list[str]) -> tuple[Resolutions, list[str]]:
    """lddtree over `files` in one process. It stops at the first file it cannot parse (a
    traceback); it is then restarted after that file, and the file is reported."""
    out: Resolutions = {}
    crashed: list[str] = []
    start = 0
    while start < len(files):
        rest = files[start:]
        argv = [sys.executable, shutil.which("lddtree") or "lddtree", "--skip-non-elfs", *rest]
        done = subprocess.run(argv, capture_output=True, text=True, env=CLEAN_ENV, check=False)
        printed = _parse_lddtree(done.stdout, out)
        if done.returncode == 0 or "Traceback" not in done.stderr:
            break
        # lddtree parses a file before printing it: the first file not printed is the culprit.
        culprit = start + printed
        if culprit >= len(files):
            break
        crashed.append(files[culprit])
        start = culprit + 1
    return out, crashed


def _parse_lddtree(stdout: str, out: Resolutions) -> int:
    """Add lddtree's answers to `out`; return how many top-level files it printed."""
    printed = 0
    current: dict[str, str | None] | None = None
    for line in stdout.splitlines():
        if not line.startswith(" "):
            current = out.setdefault(line.split(" (interpreter")[0], {})
            printed += 1
            continue
        match = LDDTREE_LINE.match(line)
        if match and current is not None:
            found = match.group(2)
            current.setdefault(match.group(1), None if found == "None" else os.path.realpath(found))
    return printed


def sglx_cli(trees: list[Path], *, jobs: int) -> None:
    argv = [str(REPO / ".venv/bin/sglx"), "scan", "--root", "/", *map(str, trees)]
    subprocess.run([*argv, "--json", "-q", "--jobs", str(jobs)], capture_output=True, check=False)


def sglx_resolutions(trees: list[Path]) -> Resolutions:
    target = tree_target(trees, root=Path("/"), rules=Rules())
    report = analyze(target, Rules(), jobs=1, progress=lambda _: None, keep_closures=True)
    assert report.closures is not None
    return {
        closure.root: {
            name: None if path is None else os.path.realpath(path)
            for name, path in closure.by_name().items()
        }
        for closure in report.closures
    }


def agreement(reference: Resolutions, tools: dict[str, Resolutions | None]) -> dict[str, Any]:
    """For every (file, name) ldd lists (but the interpreter), does each tool say the same?"""
    pairs = [
        (file, name, path)
        for file, names in reference.items()
        for name, path in names.items()
        if name not in INTERPRETERS
    ]
    out: dict[str, Any] = {"ldd_files": len(reference), "ldd_pairs": len(pairs)}
    for tool, answers in tools.items():
        if answers is None:
            continue
        same = 0
        differ = []
        for file, name, path in pairs:
            theirs = answers.get(file, {}).get(name, "absent")
            if theirs == path:
                same += 1
            else:
                differ.append({"file": file, "name": name, "ldd": path, tool: theirs})
        out[tool] = {"identical": same, "different": len(differ), "examples": differ[:10]}
    return out


def render(results: dict[str, Any]) -> str:
    m = results["machine"]
    lines = [
        "# sglx scan benchmark",
        "",
        f"{m['cpus']} CPUs, Python {m['python']}, {m['glibc']}, kernel {m['kernel']}, "
        f"load average at start {m['load_average_at_start']}",
        "",
        "| scenario | ELF files | ldd loop s | lddtree s | sglx --jobs 1 s | sglx all CPUs s | "
        "ldd / sglx | lddtree / sglx | pairs ldd lists | sglx identical | lddtree identical |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in results["scenarios"]:
        agree = s["agreement"]
        tree_same = agree.get("lddtree", {}).get("identical", "-")
        lines.append(
            f"| {s['name']} | {s['elf_files']} | {s['ldd_seconds']} | "
            f"{s['lddtree_seconds'] if s['lddtree_seconds'] is not None else '-'} | "
            f"{s['sglx_jobs1_seconds']} | {s['sglx_seconds']} | {s['ldd_over_sglx']}x | "
            f"{str(s['lddtree_over_sglx']) + 'x' if 'lddtree_over_sglx' in s else '-'} | "
            f"{agree['ldd_pairs']} | {agree['sglx']['identical']} | {tree_same} |"
        )
    for s in results["scenarios"]:
        if s.get("lddtree_crashed_on"):
            crashed = s["lddtree_crashed_on"]
            lines += [
                "",
                f"{s['name']}: lddtree stopped with a traceback on {len(crashed)} files and was "
                f"restarted after each (time included), e.g. {crashed[0]}",
            ]
    for s in results["scenarios"]:
        if "find_exec_ldd_seconds" in s:
            lines += [
                "",
                f"{s['name']}: `find -type f -exec ldd {{}} +` over every file: "
                f"{s['find_exec_ldd_seconds']} s ({s['find_exec_ldd_over_sglx']}x sglx)",
            ]
    for s in results["scenarios"]:
        for tool in ("sglx", "lddtree"):
            examples = s["agreement"].get(tool, {}).get("examples", [])
            if examples:
                lines += ["", f"{s['name']}: first {tool} answers that differ from ldd:"]
                lines += [
                    f"- {e['file']}: {e['name']}: ldd {e['ldd']}, {tool} {e[tool]}"
                    for e in examples
                ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
