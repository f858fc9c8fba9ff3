"""Benchmark delta bundles (`sglx bundle create --since`) against full ones, in one run.

    .venv/bin/python bench/bundle/bench_delta.py [--image REF] [--runs 3] [--out DIR]

- the parent: --image (tagged under a bench name, its layers kept), or by default a synthetic
  image of --parent-mib MiB of random (incompressible) bytes in three layers: `docker import` of
  the first, then `docker build` (classic builder, no network) copying in the other two;
- the child, a "plugin-only change": the parent plus one layer holding a --plugin-kib KiB file
  (the size of sglx's own wheels layer) and a LABEL, built the same way;
- bundles (`--no-scan`): full of the parent, full of the child, and the child `--since` the
  parent; sizes are the bytes bundle.json lists (and the image archive's alone);
- install: `sglx bundle install` of the full child bundle against the delta, on an engine that
  holds the parent's layers but not the child (the child image removed before each run, a fresh
  `--state` each time), --runs of each alternated, medians compared.
Every image, tag and folder it makes is removed at the end. Tests never assert timings.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SGLX = [sys.executable, "-m", "sglx.cli"]
MIB = 1 << 20


def run(argv: list[str], cwd: Path | None = None) -> str:
    """stdout of one child process; fails loudly on non-zero exit."""
    env = {**os.environ, "DOCKER_BUILDKIT": "0"}  # the classic builder: no network, no cache
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout.strip()


def timed(argv: list[str]) -> float:
    started = time.monotonic()
    run(argv)
    return time.monotonic() - started


def random_file(path: Path, size: int) -> None:
    with path.open("wb") as out:
        for start in range(0, size, 8 * MIB):
            out.write(os.urandom(min(8 * MIB, size - start)))


def build(context: Path, dockerfile: str, tag: str) -> str:
    (context / "Dockerfile").write_text(dockerfile)
    run(["docker", "build", "-q", "--network", "none", "--rm", "-t", tag, str(context)])
    return run(["docker", "image", "inspect", "-f", "{{.Id}}", tag])


def synthetic_parent(work: Path, tag: str, total: int) -> str:
    """`total` bytes of random data in three layers (half, then a third, then the rest)."""
    context = work / "parent-context"
    context.mkdir()
    sizes = [total // 2, total // 3, total - total // 2 - total // 3]
    base_tag = f"{tag}-base"
    layer = work / "layer0"
    layer.mkdir()
    random_file(layer / "blob0", sizes[0])
    archive = work / "layer0.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(layer / "blob0", arcname="data/blob0")
    shutil.rmtree(layer)
    run(["docker", "import", str(archive), base_tag])
    archive.unlink()
    for index in (1, 2):
        random_file(context / f"blob{index}", sizes[index])
    try:
        return build(
            context, f"FROM {base_tag}\nCOPY blob1 /data/blob1\nCOPY blob2 /data/blob2\n", tag
        )
    finally:
        run(["docker", "rmi", base_tag])  # the tag only: the layers are the parent's
        shutil.rmtree(context)


def plugin_child(work: Path, parent: str, tag: str, plugin_bytes: int) -> str:
    context = work / "child-context"
    context.mkdir()
    random_file(context / "sglx_plugin-0.0.0-py3-none-any.whl", plugin_bytes)
    dockerfile = (
        f"FROM {parent}\nCOPY sglx_plugin-0.0.0-py3-none-any.whl /opt/sglx/wheels/\n"
        "LABEL io.sglx.bench.delta=plugin-change\n"
    )
    try:
        return build(context, dockerfile, tag)
    finally:
        shutil.rmtree(context)


def bundle_bytes(bundle: Path) -> dict[str, int]:
    manifest = json.loads((bundle / "bundle.json").read_text())
    listed = sum(int(entry["size"]) for entry in manifest["files"])
    folder = sum(p.stat().st_size for p in bundle.rglob("*") if p.is_file())
    return {"listed": listed, "folder": folder, "archive": int(manifest["image"]["size"])}


def measure(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    stamp = f"{os.getpid()}"
    parent_tag, child_tag = f"sglx-bench/delta-parent:{stamp}", f"sglx-bench/delta-child:{stamp}"
    made: list[str] = []  # tags to remove, children first
    result: dict[str, Any] = {}
    try:
        started = time.monotonic()
        if args.image:
            run(["docker", "tag", args.image, parent_tag])
            made.insert(0, parent_tag)
            result["image"] = {"kind": "given", "ref": args.image}
        else:
            made.insert(0, parent_tag)
            synthetic_parent(work, parent_tag, args.parent_mib * MIB)
            result["image"] = {
                "kind": "synthetic",
                "what": f"docker import + build: {args.parent_mib} MiB of random bytes in 3 layers",
            }
        made.insert(0, child_tag)
        child_id = plugin_child(work, parent_tag, child_tag, args.plugin_kib * 1024)
        result["images_built_s"] = time.monotonic() - started
        layers = json.loads(run(["docker", "image", "inspect", "-f", "{{json .RootFS.Layers}}",
                                 child_tag]))  # fmt: skip
        result["image"].update(
            parent_id=run(["docker", "image", "inspect", "-f", "{{.Id}}", parent_tag]),
            child_id=child_id,
            child_layers=len(layers),
            plugin_layer_bytes=args.plugin_kib * 1024,
        )
        bundles = {name: work / name for name in ("parent-full", "child-full", "child-delta")}
        create = [*SGLX, "bundle", "create", "--arch", args.arch, "--no-scan", "-q"]
        timed([*create, "--image", parent_tag, "--out", str(bundles["parent-full"])])
        full_s = timed([*create, "--image", child_tag, "--out", str(bundles["child-full"])])
        delta_s = timed([*create, "--image", child_tag, "--out", str(bundles["child-delta"]),
                         "--since", str(bundles["parent-full"])])  # fmt: skip
        sizes = {name: bundle_bytes(path) for name, path in bundles.items()}
        full, delta = sizes["child-full"], sizes["child-delta"]
        result.update(
            bytes=sizes,
            create_full_s=full_s,
            create_delta_s=delta_s,
            delta_over_full_bytes=delta["listed"] / full["listed"],
            delta_over_full_archive=delta["archive"] / full["archive"],
        )
        runs: dict[str, list[float]] = {"child-full": [], "child-delta": []}
        for index in range(args.runs):
            order = ["child-full", "child-delta"]
            for name in order if index % 2 == 0 else reversed(order):
                run(["docker", "rmi", child_tag])  # its own layer goes; the parent's stay
                state = Path(tempfile.mkdtemp(prefix="state-", dir=work))
                runs[name].append(timed([*SGLX, "bundle", "install", str(bundles[name]),
                                         "--state", str(state), "--jit-root", str(work / "jit"),
                                         "-q"]))  # fmt: skip
                shutil.rmtree(state)
                loaded = run(["docker", "image", "inspect", "-f", "{{.Id}}", child_tag])
                if loaded != child_id:
                    raise SystemExit(f"{name} loaded {loaded}, not {child_id}")
        result.update(
            install_runs=runs,
            install_full_s=statistics.median(runs["child-full"]),
            install_delta_s=statistics.median(runs["child-delta"]),
        )
        result["install_delta_over_full"] = result["install_delta_s"] / result["install_full_s"]
    finally:
        for tag in made:
            subprocess.run(["docker", "rmi", tag], capture_output=True)  # absent: fine
    return result


def markdown(results: dict[str, Any]) -> str:
    r = results["delta"]
    full, delta = r["bytes"]["child-full"], r["bytes"]["child-delta"]
    rows = [
        ("delta size vs full (plugin-only change)", f"{r['delta_over_full_bytes'] * 100:.2f}% "
         f"({delta['listed']:,} vs {full['listed']:,} bytes)", "<= 1%"),
        ("image archive alone", f"{r['delta_over_full_archive'] * 100:.2f}% "
         f"({delta['archive']:,} vs {full['archive']:,} bytes)", ""),
        ("delta install vs full install", f"{r['install_delta_over_full'] * 100:.0f}% "
         f"({r['install_delta_s']:.2f} s vs {r['install_full_s']:.2f} s, median of "
         f"{len(r['install_runs']['child-full'])}, alternated)", ""),
        ("delta create vs full create", f"{r['create_delta_s'] / r['create_full_s']:.2f}x "
         f"({r['create_delta_s']:.1f} s vs {r['create_full_s']:.1f} s, one run each)", ""),
    ]  # fmt: skip
    image = r["image"]
    what = image.get("what") or f"`{image['ref']}`"
    lines = [
        f"# delta bundle benchmark: {results['machine']}",
        "",
        f"Parent: {what}; child: the parent plus one {image['plugin_layer_bytes'] // 1024} KiB "
        f"layer and a LABEL ({image['child_layers']} layers). {results['versions']}.",
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
    parser.add_argument("--image", help="parent image (default: a synthetic one)")
    parser.add_argument("--parent-mib", type=int, default=300, help="synthetic parent size")
    parser.add_argument("--plugin-kib", type=int, default=150, help="the child's new layer")
    parser.add_argument("--runs", type=int, default=3, help="installs of each bundle")
    parser.add_argument("--arch", default="cpu")
    parser.add_argument("--workdir", type=Path, help="scratch folder (default: in /tmp)")
    parser.add_argument(
        "--out",
        type=Path,
        default=REPO / "bench" / "bundle" / "results",
        help="write <out>/delta-<name>.json and .md (default: bench/bundle/results)",
    )
    parser.add_argument("--name", default="synthetic-2core")
    args = parser.parse_args()
    if args.runs < 1 or args.parent_mib < 1 or args.plugin_kib < 1:
        parser.error("--runs, --parent-mib and --plugin-kib must be at least 1")
    docker_version = run(["docker", "version", "-f", "{{.Server.Version}}"])
    sglx_version = run([*SGLX, "--version"])
    work = Path(tempfile.mkdtemp(prefix="sglx-bench-delta-", dir=args.workdir))
    try:
        results = {
            "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} CPUs",
            "versions": f"{sglx_version}, Docker {docker_version}, "
            f"Python {platform.python_version()}",
            "delta": measure(args, work),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = markdown(results)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"delta-{args.name}.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.out / f"delta-{args.name}.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
