"""Benchmark a scan of a bundle's image archive: every file unpacked (the baseline: what
`sglx scan --bundle` did before) against sources, bytecode and text kept as names only (what
it does now), on the same archive, alternated; and check that both give the same report.

    .venv/bin/python bench/scan/bench_unpack.py BUNDLE [--arch ARCH] [--runs N] [--json] [--out DIR]

Each run unpacks the archive from its chunks into scratch space, scans it with the arch's rules
and removes the scratch space, all timed; the chunks are read once before, so that both modes
start from the same page cache. Tests never assert timings; this script is where they live.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from sglx.bundle import layout
from sglx.bundle.manifest import parse
from sglx.bundle.scan_target import bundle_archive
from sglx.bundle.verify import read_manifest_bytes
from sglx.progress import Progress
from sglx.scan.analysis import analyze
from sglx.scan.archive import chunked_targets
from sglx.scan.inventory import names_only
from sglx.scan.result import build_result
from sglx.scan.rules import Rules
from sglx_core.profile import load_profile
from sglx_core.scratch import scratch_dir

MODES: dict[str, Callable[[str], bool]] = {
    "every file written (baseline)": lambda name: False,
    "text kept as names only (sglx)": names_only,
}


def scan_once(bundle: Path, rules: Rules, keep_names: Callable[[str], bool]) -> tuple[float, Any]:
    """Seconds of one unpack + scan + cleanup, and the report without its timings."""
    spec = replace(bundle_archive(bundle), wheels=())  # the image archive alone
    progress = Progress("bench", quiet=True)
    started = time.monotonic()
    with scratch_dir("sglx-bench-unpack-") as scratch:
        targets = chunked_targets(spec, scratch, progress, keep_names)
        jobs = len(os.sched_getaffinity(0))
        reports = [analyze(target, rules, jobs=jobs, progress=progress) for target in targets]
        result = build_result(reports, {"kind": "bundle", "path": str(bundle)})
    seconds = time.monotonic() - started
    data = result.envelope()["data"]
    for scan in data["scans"]:
        scan.pop("seconds", None)
        scan.pop("root", None)
    return seconds, data


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--arch", default="cpu")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", type=Path, help="write results as JSON and Markdown here")
    args = parser.parse_args()
    rules = Rules.from_profile(load_profile(args.arch))
    manifest = parse(read_manifest_bytes(args.bundle), str(args.bundle / layout.MANIFEST))
    for chunk in manifest.image.chunks:  # the same page-cache state for every run
        with (args.bundle / chunk).open("rb") as handle:
            while handle.read(1 << 24):
                pass
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    reports: dict[str, Any] = {}
    for run in range(args.runs):
        for mode, keep in MODES.items():
            seconds, reports[mode] = scan_once(args.bundle, rules, keep)
            times[mode].append(seconds)
            print(f"run {run + 1}: {mode}: {seconds:.1f} s", file=sys.stderr)
    before, now = (statistics.median(times[mode]) for mode in MODES)
    same = len({json.dumps(r, sort_keys=True) for r in reports.values()}) == 1
    scan = reports[next(iter(MODES))]["scans"][0]
    result = {
        "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} cores",
        "bundle": str(args.bundle),
        "image": manifest.image.ref,
        "files": scan.get("files"),
        "elf_files": scan.get("elf_files"),
        "runs": args.runs,
        "seconds": times,
        "median_before_s": round(before, 1),
        "median_now_s": round(now, 1),
        "speedup": round(before / now, 2),
        "same_report": same,
    }
    table = [
        "| mode | median of runs (s) |",
        "|---|---|",
        *(f"| {mode} | {statistics.median(times[mode]):.1f} |" for mode in MODES),
        "",
        f"**{before / now:.2f}x** faster; same report in both modes: {'yes' if same else 'NO'} "
        f"({scan.get('files')} files, {scan.get('elf_files')} ELF; {result['machine']}; image "
        f"{manifest.image.ref}, {args.runs} alternated runs)",
    ]
    print(json.dumps(result, indent=2) if args.json else "\n".join(table))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "unpack-cpu-2core.json").write_text(json.dumps(result, indent=2) + "\n")
        (args.out / "unpack-cpu-2core.md").write_text(
            "# Scan of a bundle: every file unpacked vs text as names only\n\n"
            "`bench/scan/bench_unpack.py` (unpack from the chunks, scan with the arch's rules, "
            "remove the scratch space; alternated runs, chunks pre-read).\n\n"
            + "\n".join(table)
            + "\n"
        )
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
