"""What the SBOM adds to the scan that makes it: `sglx scan --image REF --arch ARCH` against
the same scan with `--sbom FILE` (what `bundle create` runs), alternating, N runs each.

    .venv/bin/python bench/sbom/bench_sbom.py --image sglx/cpu:latest [--arch cpu] [--runs 3]
        [--json] [--out FILE]

The ratio is with-SBOM / without, of the medians of the wall times (target <= 1.05: the SBOM
reads the root the scan already unpacked). It also prints the SBOM's size and its components by
kind. Run it on a quiet machine: each run exports and scans the whole image.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SGLX = Path(sys.executable).with_name("sglx")
TARGET = 1.05


def timed(argv: list[str]) -> float:
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - started
    if done.returncode not in (0, 1):  # 1: the scan's findings, still a full run
        raise SystemExit(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr[-2000:]}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--image", required=True)
    parser.add_argument("--arch", default="cpu")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    scan = [str(SGLX), "scan", "--image", args.image, "--arch", args.arch, "--json", "-q"]
    with tempfile.TemporaryDirectory() as scratch:
        sbom = Path(scratch) / "sbom.cdx.json"
        timed(scan)  # warm-up: the page cache holds the image's layers for both
        bare, with_sbom = [], []
        for _ in range(args.runs):
            bare.append(timed(scan))
            with_sbom.append(timed([*scan, "--sbom", str(sbom)]))
        document = json.loads(sbom.read_text())
        size = sbom.stat().st_size
    kinds: dict[str, int] = {}
    for component in document.get("components", []):
        purl = component.get("purl", "")
        kind = "debian" if purl.startswith("pkg:deb/") else "python" if purl.startswith(
            "pkg:pypi/") else component.get("type", "other")  # fmt: skip
        kinds[kind] = kinds.get(kind, 0) + 1
    ratio = statistics.median(with_sbom) / statistics.median(bare)
    result = {
        "machine": f"{platform.machine()}, {len(__import__('os').sched_getaffinity(0))} cores",
        "image": args.image,
        "runs": args.runs,
        "scan_s": [round(t, 2) for t in bare],
        "scan_with_sbom_s": [round(t, 2) for t in with_sbom],
        "ratio": round(ratio, 3),
        "target": TARGET,
        "sbom_bytes": size,
        "components": dict(sorted(kinds.items())),
    }
    if args.json:
        text = json.dumps(result, indent=2) + "\n"
    else:
        text = "\n".join([
            f"# SBOM cost: `sglx scan --image {args.image}` with and without `--sbom`",
            "",
            f"{result['machine']}, {args.runs} alternating runs each, wall seconds.",
            "",
            "| scan | median s | runs |",
            "|---|---|---|",
            f"| without --sbom (baseline) | {statistics.median(bare):.1f} | {result['scan_s']} |",
            f"| with --sbom | {statistics.median(with_sbom):.1f} | {result['scan_with_sbom_s']} |",
            "",
            f"ratio with / without: **{ratio:.3f}** (target <= {TARGET}: "
            f"{'met' if ratio <= TARGET else 'not met'})",
            "",
            f"SBOM: {size:,} bytes; components {result['components']}",
            "",
        ])  # fmt: skip
    print(text, end="")
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
