"""What the supply-chain evidence adds to `bundle create`: the SBOM and the attestations.

1. The SBOM: `sglx scan --image REF --arch ARCH` against the same scan with `--sbom FILE` (what
   `bundle create` runs for meta/sbom.cdx.json), alternating, N runs each.
2. The attestations: `sglx bundle create` against the same with `--attest-key KEY` (SLSA
   provenance, the scan's result, the in-toto layout), alternating, N runs each.

    .venv/bin/python bench/sbom/bench_sbom.py --image sglx/cpu:latest [--arch cpu] [--runs 3]
        [--no-create] [--json] [--out FILE]

Ratios are of the medians of the wall times. The one the target (<= 1.05) applies to is a
whole `bundle create` with both against one without either: (create with --attest-key) /
(create - the SBOM's share). It also prints the SBOM's size and its components by kind. Run it
on a quiet machine: each run exports and scans the whole image.
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

from sglx.sbom.document import summary

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
    parser.add_argument("--no-create", action="store_true", help="time the scan pair only")
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
        size = sbom.stat().st_size
        kinds = summary(sbom.read_text())["components"]
    ratio = statistics.median(with_sbom) / statistics.median(bare)
    sbom_s = statistics.median(with_sbom) - statistics.median(bare)
    create = None if args.no_create else _creates(args.image, args.arch, args.runs)
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
    if create is not None:
        plain, attested = statistics.median(create[0]), statistics.median(create[1])
        result["create_s"] = [round(t, 2) for t in create[0]]
        result["create_attested_s"] = [round(t, 2) for t in create[1]]
        result["attestations_ratio"] = round(attested / plain, 3)
        result["evidence_ratio"] = round(attested / (plain - sbom_s), 3)
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
            *_create_lines(result),
        ])  # fmt: skip
    print(text, end="")
    if args.out:
        args.out.write_text(text)
    return 0


def _creates(image: str, arch: str, runs: int) -> tuple[list[float], list[float]]:
    """`bundle create` without and with --attest-key, alternating, each into a fresh folder."""
    with tempfile.TemporaryDirectory() as scratch:
        key = Path(scratch) / "site-key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-b", "256", "-m", "PEM", "-N", "",
                        "-f", str(key)], check=True)  # fmt: skip
        plain, attested = [], []
        for n in range(runs):
            create = [str(SGLX), "bundle", "create", "--arch", arch, "--image", image, "-q"]
            plain.append(timed([*create, "--out", f"{scratch}/plain-{n}"]))
            attested.append(timed([*create, "--out", f"{scratch}/attested-{n}",
                                   "--attest-key", str(key)]))  # fmt: skip
            for folder in (f"{scratch}/plain-{n}", f"{scratch}/attested-{n}"):
                subprocess.run(["rm", "-rf", folder], check=True)
    return plain, attested


def _create_lines(result: dict) -> list[str]:
    if "create_s" not in result:
        return []
    return [
        "| bundle create | median s | runs |",
        "|---|---|---|",
        f"| without --attest-key | {statistics.median(result['create_s']):.1f} | "
        f"{result['create_s']} |",
        f"| with --attest-key | {statistics.median(result['create_attested_s']):.1f} | "
        f"{result['create_attested_s']} |",
        "",
        f"attestations: **{result['attestations_ratio']:.3f}** of a `bundle create`; the SBOM "
        f"and the attestations together: **{result['evidence_ratio']:.3f}** of a create "
        f"without either (target <= {TARGET}: "
        f"{'met' if result['evidence_ratio'] <= TARGET else 'not met'})",
        "",
    ]


if __name__ == "__main__":
    sys.exit(main())
