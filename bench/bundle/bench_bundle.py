"""Benchmark `sglx bundle` against its baselines on the same image, in one run.

    .venv/bin/python bench/bundle/bench_bundle.py [--image REF] [--small REF] [--out DIR]

- create: `sglx bundle create --no-scan` (save stream chunked and hashed as it is written)
  against `docker save -o FILE` of the same image alone; the scan is separate work, timed
  on its own (`sglx bundle create` with the scan);
- verify: `sglx bundle verify --no-scan` throughput against `sha256sum` of the same files (one
  process over all of them, as a site would run `sha256sum -c`); each is run twice, alternating,
  and the second runs are compared (same page-cache state);
- install: the second `sglx bundle install` (nothing to do) against the first (verify + load);
  the image is a labelled copy of --image (same layers), removed without pruning first;
- peak RSS of create and verify (wait4's ru_maxrss) at two image sizes (--small and --image).
Work files go under --workdir (default: a folder in /tmp), removed at the end. Tests never
assert timings; this script is where they live.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SGLX = [sys.executable, "-m", "sglx.cli"]


def timed(argv: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of one child process; fails loudly on non-zero exit."""
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.monotonic() - started
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"{' '.join(argv)} exited {code}")
    return seconds, int(usage.ru_maxrss)


def labelled_copy(docker: Any, source: str, tag: str) -> str:
    context = io.BytesIO(f"FROM {source}\nLABEL io.sglx.bench.bundle={tag}\n".encode())
    image, _ = docker.images.build(fileobj=context, tag=tag, network_mode="none", rm=True)
    return str(image.id)


def files_of(bundle: Path) -> list[str]:
    return sorted(str(p) for p in bundle.rglob("*") if p.is_file())


def measure(docker: Any, source: str, work: Path, arch: str, full: bool) -> dict[str, Any]:
    tag = f"sglx-bench/bundle:{os.getpid()}-{abs(hash(source)) % 10_000}"
    labelled_copy(docker, source, tag)
    archive, bundle, scanned = work / "save.tar", work / "bundle", work / "scanned"
    result: dict[str, Any] = {"image": source}
    try:
        save_s, _ = timed(["docker", "save", "-o", str(archive), tag])
        result["archive_bytes"] = archive.stat().st_size
        archive.unlink()
        create = [*SGLX, "bundle", "create", "--arch", arch, "--image", tag, "-q"]
        create_s, create_rss = timed([*create, "--out", str(bundle), "--no-scan"])
        result.update(docker_save_s=save_s, create_s=create_s, create_peak_rss_kib=create_rss)
        result["create_over_save"] = create_s / save_s
        files = files_of(bundle)
        runs: dict[str, list[float]] = {"sha256sum": [], "verify": []}
        verify_rss = 0
        for _ in range(2):
            runs["sha256sum"].append(timed(["sha256sum", *files])[0])
            seconds, rss = timed([*SGLX, "bundle", "verify", str(bundle), "--no-scan", "-q"])
            runs["verify"].append(seconds)
            verify_rss = max(verify_rss, rss)
        result.update(
            sha256sum_s=runs["sha256sum"][-1],
            verify_s=runs["verify"][-1],
            verify_peak_rss_kib=verify_rss,
            verify_speedup=runs["sha256sum"][-1] / runs["verify"][-1],
        )
        if full:
            scan_s, _ = timed([*create, "--out", str(scanned)])
            result["create_with_scan_s"] = scan_s
            shutil.rmtree(scanned)
            docker.images.remove(tag, noprune=True)
            state = work / "state"
            install = [*SGLX, "bundle", "install", str(bundle), "--state", str(state), "-q"]
            first_s, _ = timed(install)
            second_s, _ = timed(install)
            result.update(
                install_first_s=first_s,
                install_second_s=second_s,
                install_second_over_first=second_s / first_s,
            )
    finally:
        shutil.rmtree(bundle, ignore_errors=True)
        shutil.rmtree(scanned, ignore_errors=True)
        archive.unlink(missing_ok=True)
        with contextlib.suppress(Exception):  # already removed
            docker.images.remove(tag, noprune=True)
    return result


def markdown(results: dict[str, Any]) -> str:
    big, small = results["large"], results["small"]
    gib = 1 << 30

    def mib(kib: int) -> str:
        return f"{kib / 1024:.0f} MiB"

    rows = [
        ("verify vs `sha256sum`", f"{big['verify_speedup']:.2f}x faster "
         f"({big['archive_bytes'] / gib:.2f} GiB: {big['verify_s']:.1f} s vs "
         f"{big['sha256sum_s']:.1f} s)", ">= 4x"),
        ("create (no scan) vs `docker save -o`", f"{big['create_over_save']:.2f}x "
         f"({big['create_s']:.1f} s vs {big['docker_save_s']:.1f} s)", "<= 1.15x"),
        ("create with the image scan", f"{big['create_with_scan_s']:.1f} s", ""),
        ("second install vs first", f"{big['install_second_over_first'] * 100:.1f}% "
         f"({big['install_second_s']:.2f} s vs {big['install_first_s']:.1f} s)", "<= 5%"),
        ("peak RSS create", f"{mib(small['create_peak_rss_kib'])} at "
         f"{small['archive_bytes'] / gib:.2f} GiB, {mib(big['create_peak_rss_kib'])} at "
         f"{big['archive_bytes'] / gib:.2f} GiB", "flat"),
        ("peak RSS verify", f"{mib(small['verify_peak_rss_kib'])} / "
         f"{mib(big['verify_peak_rss_kib'])}", "flat"),
    ]  # fmt: skip
    lines = [
        f"# bundle benchmark: {results['machine']}",
        "",
        "| measure | result | target |",
        "|---|---|---|",
        *(f"| {a} | {b} | {c} |" for a, b, c in rows),
        "",
        "Raw numbers: the .json next to this file.",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--image", default="sglx/cpu:latest", help="the large image")
    parser.add_argument("--small", default="sglx/base-cpu:bookworm", help="the small image")
    parser.add_argument("--arch", default="cpu")
    parser.add_argument("--workdir", type=Path, help="scratch folder (default: in /tmp)")
    parser.add_argument(
        "--out",
        type=Path,
        default=REPO / "bench" / "bundle" / "results",
        help="write <out>/<name>.json and .md (default: bench/bundle/results)",
    )
    parser.add_argument("--name", default="cpu-2core")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO / "scripts"))
    from sglx.engine import docker_client

    docker = docker_client()
    work = Path(tempfile.mkdtemp(prefix="sglx-bench-bundle-", dir=args.workdir))
    try:
        results = {
            "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} CPUs",
            "small": measure(docker, args.small, work, args.arch, full=False),
            "large": measure(docker, args.image, work, args.arch, full=True),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = markdown(results)
    print(text)
    if args.out is not None:  # always set: the default is the results folder
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"{args.name}.json").write_text(json.dumps(results, indent=2) + "\n")
        (args.out / f"{args.name}.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
