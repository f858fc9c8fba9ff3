"""Benchmark rollout.yml's staging against the serial install it replaced, in one run.

    .venv/bin/python bench/bundle/bench_rollout.py --base REF --image REF [--layer-mib 512]
        [--cap-kbit 200000] [--runs 1] [--out DIR]

On two test hosts (tests/helpers/test_hosts.py: systemd containers with sshd, sharing this
machine's engine), configured by site.yml and serving --image (a cpu serving image built from
this tree; --base is the Debian base the hosts are built from):

- v1: a full bundle of --image, rolled out from a folder both hosts see (nothing copied);
- v2: --image plus one layer of --layer-mib MiB of random bytes (an upgrade's new layers), as a
  delta bundle over v1, copied from the control node (`sglx_bundle_src`) to each host, each
  copy capped at --cap-kbit Kbit/s (`sglx_rollout_copy_bandwidth_kbit`: a per-host link);
- each run rolls v2 out to both hosts, one batch per host (`sglx_rollout_serial=1`, the
  default), once serially (`sglx_rollout_stage=false`: each host copies and loads inside its
  batch, as before) and once staged (both hosts copy, verify and load first, in parallel),
  alternating; between runs the fleet goes back to v1, and v2's image, host copies and install
  records are removed, so every run copies and loads the same bytes;
- then once with the site registry (role sglx_registry: Debian's docker-registry on 127.0.0.1,
  set up as tests/helpers/site_registry.py does): v1 seeded first with registry.yml, then the
  rollout seeds v2 (pushing only its new layer) and both hosts pull it by digest;
- reported: the rollout's wall time per mode, and the bytes the control node sent per host (the
  rollout summary's `copied`, plus, with the registry, what it pushed once, per host). The
  registry run's time is not compared: an engine that got v1 by `docker load` does not know
  its layers' registry digests and downloads them all on its first pull (from the registry,
  not the control node).
Every container, image and folder it makes is removed at the end. Tests never assert timings.
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
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))  # the e2e's test hosts, from a checkout

from helpers.child_env import freeze_as  # noqa: E402
from helpers.engine_fixtures import free_port  # noqa: E402
from helpers.site_registry import site_registry  # noqa: E402
from helpers.test_hosts import SshHost, build_host_image, sh  # noqa: E402

ANSIBLE = REPO / "ansible"
BIN = Path(sys.executable).parent
MIB = 1 << 20
ON_HOST = "/srv/sglx-bench/v2"
COPIED = re.compile(r"(host-[ab]): \w+: [^\n]*; copied [^\n]* \((\d+) bytes\)")
PUSHED = re.compile(r"the control node pushed [^\n]* \((\d+) bytes\) once")


class Bench:
    def __init__(self, work: Path, hosts: list[SshHost], key: Path) -> None:
        self.work, self.hosts, self.key = work, hosts, key
        self.ports = {h.name: free_port() for h in hosts}
        self.inventory = work / "hosts.yml"

    def write_inventory(self) -> None:
        group_vars = self.work / "group_vars" / "sglx"
        group_vars.mkdir(parents=True)
        sh(str(BIN / "sglx"), "ansible", "vars", "--arch", "cpu", "--out",
           str(group_vars / "sglx_profile.yml"))  # fmt: skip
        hosts = {
            h.name: {
                "ansible_host": "127.0.0.1",
                "ansible_port": h.ssh_port,
                "ansible_user": "ops",
                "ansible_ssh_private_key_file": str(self.key),
                "ansible_ssh_common_args": "-o StrictHostKeyChecking=no "
                "-o UserKnownHostsFile=/dev/null",
                "container_runtime_engine_managed": False,
                "sglang_service_container": h.container + "-server",
                "sglang_service_host_port": self.ports[h.name],
                "sglang_service_publish_address": "127.0.0.1",
                "sglang_service_health_timeout": 420,
                "sglang_service_jit_cache_root": str(self.work / f"jit-{h.name}"),
            }
            for h in self.hosts
        }
        self.inventory.write_text(json.dumps({"sglx": {"hosts": hosts}}))

    def play(self, playbook: str, *extra: str) -> tuple[float, str]:
        started = time.monotonic()
        done = subprocess.run(
            [str(BIN / "ansible-playbook"), "-i", str(self.inventory), playbook, *extra],
            cwd=ANSIBLE, capture_output=True, text=True, timeout=3600, check=False,
            env={**os.environ, "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg"),
                 "ANSIBLE_NOCOLOR": "1", "ANSIBLE_CALLBACK_RESULT_FORMAT": "json"},
        )  # fmt: skip
        took = time.monotonic() - started
        out = done.stdout + done.stderr
        if done.returncode != 0:
            (self.work / "failed.log").write_text(out)
            raise SystemExit(f"{playbook} {' '.join(extra)} failed: {out[-3000:]}")
        return took, out

    def reset_to(self, v1: Path, v2_id: str, v2_digest: str) -> None:
        """Both hosts back on v1; v2's image, host copies and install records gone."""
        self.play("rollout.yml", "-e", f"sglx_bundle_path={v1}", "-e", "sglx_rollout_serial=2")
        sh("docker", "rmi", v2_id, check=False)
        record = v2_digest.replace(":", "-")
        for h in self.hosts:
            h.exec(f"rm -rf {ON_HOST} /var/lib/sglx/bundles/{record}.json "
                   f"/var/lib/sglx/bundles/{record}.log")  # fmt: skip


def random_layer_image(source: str, tag: str, work: Path, mib: int) -> None:
    context = work / "v2-context"
    context.mkdir()
    with (context / "layer.bin").open("wb") as out:
        for _ in range(mib // 8):
            out.write(os.urandom(8 * MIB))
    (context / "Dockerfile").write_text(
        f"FROM {source}\nLABEL io.sglx.bench.version=2\nCOPY layer.bin /opt/sglx-bench/layer.bin\n"
    )
    sh("docker", "build", "-q", "-t", tag, str(context), timeout=1800)
    shutil.rmtree(context)


def bundle_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the Debian base the test hosts build on")
    parser.add_argument("--image", required=True, help="a cpu serving image built from this tree")
    parser.add_argument("--layer-mib", type=int, default=512)
    parser.add_argument("--cap-kbit", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "bundle" / "results")
    args = parser.parse_args()
    freeze_as(dict(os.environ))

    work = Path(tempfile.mkdtemp(prefix="sglx-bench-rollout-"))
    run_id = work.name.rsplit("-", 1)[-1].lower()
    key = work / "id_ed25519"
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key))
    host_image = f"sglx-bench/host:{run_id}"
    v1_tag, v2_tag = f"sglx-bench/v1:{run_id}", f"sglx-bench/v2:{run_id}"
    hosts = [SshHost(f"host-{n}", f"sglx-bench-{run_id}-{n}", free_port()) for n in "ab"]
    bench = Bench(work, hosts, key)
    v2_id = ""
    try:
        print(f"bench: test hosts from {args.base}", flush=True)
        build_host_image(args.base, host_image, work, key.with_suffix(".pub"))
        for h in hosts:
            (work / f"jit-{h.name}").mkdir()
            jit = work / f"jit-{h.name}"
            h.start(host_image, ["-v", f"{work}:{work}:ro", "-v", f"{jit}:{jit}"])
        bench.write_inventory()
        bench.play("site.yml")
        print("bench: v1 (full bundle) and v2 (a delta of one random layer)", flush=True)
        sh("docker", "tag", args.image, v1_tag)
        v1, v2 = work / "v1", work / "v2"
        sh(str(BIN / "sglx"), "bundle", "create", "--arch", "cpu", "--image", v1_tag,
           "--out", str(v1), "--no-scan", "-q", timeout=3600)  # fmt: skip
        random_layer_image(v1_tag, v2_tag, work, args.layer_mib)
        sh(str(BIN / "sglx"), "bundle", "create", "--arch", "cpu", "--image", v2_tag,
           "--out", str(v2), "--since", str(v1), "--no-scan", "-q", timeout=3600)  # fmt: skip
        manifest = json.loads((v2 / "bundle.json").read_text())
        v2_id = str(manifest["image"]["id"])
        v2_digest = "sha256:" + sh("sha256sum", str(v2 / "bundle.json")).stdout.split()[0]
        sh("docker", "rmi", v2_tag)
        bench.play("rollout.yml", "-e", f"sglx_bundle_path={v1}", "-e", "sglx_rollout_serial=2")

        common = ["-e", f"sglx_bundle_src={v2}", "-e", f"sglx_bundle_path={ON_HOST}",
                  "-e", f"sglx_rollout_copy_bandwidth_kbit={args.cap_kbit}"]  # fmt: skip
        times: dict[str, list[float]] = {"serial": [], "staged": []}
        copied: dict[str, dict[str, int]] = {}
        for run in range(args.runs):
            for mode in ("serial", "staged"):
                stage = "true" if mode == "staged" else "false"
                took, out = bench.play("rollout.yml", *common, "-e", f"sglx_rollout_stage={stage}")
                times[mode].append(took)
                copied[mode] = {h: int(n) for h, n in COPIED.findall(out)}
                print(f"bench: run {run + 1} {mode}: {took:.1f} s, copied {copied[mode]}",
                      flush=True)  # fmt: skip
                bench.reset_to(v1, v2_id, v2_digest)

        print("bench: the same with a site registry on 127.0.0.1", flush=True)
        with site_registry(work / "registry") as registry:
            extra = json.dumps(registry.vars)
            bench.play("registry.yml", "-e", f"sglx_bundle_src={v1}", "-e", extra)
            took, out = bench.play("rollout.yml", *common, "-e", extra)
            copied["registry"] = {h: int(n) for h, n in COPIED.findall(out)}
            pushed = int(PUSHED.findall(out)[-1])
            print(f"bench: registry: {took:.1f} s, copied {copied['registry']}, pushed {pushed}",
                  flush=True)  # fmt: skip
            bench.reset_to(v1, v2_id, v2_digest)

        serial, staged = statistics.median(times["serial"]), statistics.median(times["staged"])
        hosts_n = len(hosts)
        result: dict[str, Any] = {
            "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "hosts": 2,
            "image": args.image,
            "v2_delta_bytes": bundle_bytes(v2),
            "layer_mib": args.layer_mib,
            "cap_kbit_per_host": args.cap_kbit,
            "runs": args.runs,
            "seconds": times,
            "median_serial_s": round(serial, 1),
            "median_staged_s": round(staged, 1),
            "staged_over_serial": round(staged / serial, 3),
            "control_node_bytes_per_host": copied,
            "registry_pushed_bytes_once": pushed,
            "registry_control_node_bytes_per_host": {
                h: n + pushed // hosts_n for h, n in copied["registry"].items()
            },
        }
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "rollout-2hosts-2core.json").write_text(json.dumps(result, indent=2) + "\n")
        per_host = {m: max(c.values()) for m, c in copied.items()}
        with_registry = max(result["registry_control_node_bytes_per_host"].values())
        table = (
            "| rollout of a delta to 2 hosts (serial=1) | wall time (median) "
            "| control-node bytes per host |\n|---|---|---|\n"
            f"| serial (install inside each batch) | {serial:.1f} s | {per_host['serial']:,} |\n"
            f"| staged (copy, verify, load first) | {staged:.1f} s | {per_host['staged']:,} |\n"
            f"| staged, site registry (push once, pull) | not compared | {with_registry:,} "
            f"({per_host['registry']:,} copied + {pushed:,} pushed / {hosts_n}) |\n"
            f"| ratio staged / serial | {staged / serial:.3f} | |\n"
            f"| ratio registry / copy, bytes per host | | "
            f"{with_registry / per_host['staged']:.3f} |\n"
        )
        (args.out / "rollout-2hosts-2core.md").write_text(
            f"# rollout.yml, staged vs serial\n\n{result['machine']}; delta "
            f"{result['v2_delta_bytes']:,} bytes ({args.layer_mib} MiB layer), each copy capped at "
            f"{args.cap_kbit:,} Kbit/s; {args.runs} run(s) per mode.\n\n{table}"
        )
        print(table)
        return 0
    finally:
        for h in hosts:
            sh("docker", "rm", "-f", h.container + "-server", check=False)
            h.remove()
        sh("docker", "rmi", "-f", host_image, v1_tag, v2_tag, *([v2_id] if v2_id else []),
           check=False)  # fmt: skip
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
