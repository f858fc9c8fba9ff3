"""`sglx image build` on the cpu reference: a real image serves like transformers.

One cold build (demo model, base debootstrapped by the session), one container answering
/health, /v1/models, a greedy completion and the replay of the golden numerics the build
computed, and one rebuild after touching only plugin code.
The container runs as the run spec says (sglx.run_spec: the line install.sh and `sglx bundle
install` print), so it mounts its node-local JIT cache folder; one restart from the same line
shows the folder persists, and a folder that is not private stops the server before sglang.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers.engine_fixtures import build, free_port, remove_images
from helpers.jit_cache import cache_entries
from helpers.server import http, transformers_greedy, wait_healthy

from sglx.run_spec import Site, docker_run_words, jit_folder, make_jit_folder, run_spec
from sglx.wheels.lockfile import canonical
from sglx.wheels.steps import load_lock
from sglx_core.gate.golden import BUILTIN_PROMPTS, GOLDEN_FILE, GOLDEN_LABEL
from sglx_core.jit_cache import HOST_ENV
from sglx_core.profile import load_profile

pytestmark = [pytest.mark.docker, pytest.mark.slow]
PLUGIN_FILE = Path(__file__).resolve().parents[2] / "plugin" / "sglx_platform" / "failures.py"


def test_image_is_labelled_with_what_it_carries(docker: Any, cpu_image: dict) -> None:
    labels = docker.images.get(cpu_image["tag"]).labels
    assert labels["io.sglx.arch"] == "cpu"
    assert labels["io.sglx.model.demo"] == "true"
    assert labels["io.sglx.model.name"] == "demo"
    assert labels["io.sglx.lock.digest"] == load_lock(load_profile("cpu")).digest
    assert labels["io.sglx.weights.digest"].startswith("sha256:")
    assert labels["io.sglx.sglang.version"] == "0.5.23"
    assert len(labels["org.opencontainers.image.revision"]) >= 40
    assert labels["org.opencontainers.image.base.digest"].startswith("sha256:")
    config = docker.images.get(cpu_image["tag"]).attrs["Config"]
    assert config["User"] == "sglx"
    assert "HF_HUB_OFFLINE=1" in config["Env"]
    assert config["Healthcheck"]["Test"][-1].endswith("sglx-healthcheck")


def test_image_scan_is_clean(cpu_bundle_scan: dict[str, Any]) -> None:
    """Every ELF dependency resolves, or the cpu profile's scan rules accept it with a reason.

    Read from the run's one scan of the session's cpu bundle (`sglx scan --bundle`: the archive
    of a copy of this image, layer for layer); scanning 6.4 GB a second time would only repeat
    it."""
    envelope = cpu_bundle_scan
    assert (envelope["exit_code"], envelope["findings"]) == (0, [])
    [scan] = envelope["data"]["scans"]
    assert scan["dependencies"]["resolved"] > 0
    assert all(item["reason"] for item in scan["accepted"])


# Run in a container of the image, as root, with the image's own tools: its ELF files (by their
# magic), the files dpkg's lists and every distribution's RECORD claim (through the kernel's
# realpath and importlib.metadata, not sglx's reader), its installed packages and distributions.
CONTENTS_ORACLE = r"""
import glob, importlib.metadata as md, json, os, subprocess
elves, sites = set(), []
for top, dirs, files in os.walk("/"):
    if top == "/":
        dirs[:] = [d for d in dirs if d not in ("proc", "sys", "dev", "tmp", "run")]
    sites += [os.path.join(top, d) for d in dirs if d in ("site-packages", "dist-packages")]
    for name in files:
        path = os.path.join(top, name)
        if not os.path.islink(path):
            with open(path, "rb") as handle:
                if handle.read(4) == b"\x7fELF":
                    elves.add(path)
owned = set()
for listed in glob.glob("/var/lib/dpkg/info/*.list"):
    owned |= {os.path.realpath(line.rstrip("\n")) for line in open(listed) if line.strip()}
dists = list(md.distributions(path=sites))
for dist in dists:
    owned |= {os.path.realpath(str(f.locate())) for f in dist.files or []}
query = ["dpkg-query", "-W", "-f", "${db:Status-Abbrev}|${Package}|${Version}\n"]
debs = [line.split("|")[1:] for line in subprocess.check_output(query, text=True).splitlines()
        if line.startswith("ii")]
print(json.dumps({"loose": sorted(elves - owned), "debian": sorted(debs),
                  "python": sorted({(d.metadata["Name"], d.version) for d in dists})}))
"""


def test_the_sbom_lists_what_the_image_holds(
    docker: Any, cpu_image: dict, cpu_bundle_scan: dict[str, Any]
) -> None:
    """The SBOM the run's scan of the cpu bundle wrote (`--sbom`, what `bundle create` puts in
    meta/sbom.cdx.json) validates against CycloneDX 1.6, and lists every installed Debian
    package, every Python distribution, and every ELF file neither claims, each as the image
    itself reports them (CONTENTS_ORACLE)."""
    from sglx.sbom.document import validation_error

    text = Path(cpu_bundle_scan["data"]["sbom"]["path"]).read_text()
    assert validation_error(text) is None
    document = json.loads(text)
    found = docker.containers.run(cpu_image["tag"], ["python3", "-c", CONTENTS_ORACLE],
                                  entrypoint=[], user="root", network_disabled=True,
                                  remove=True)  # fmt: skip
    image = json.loads(found)
    components = document["components"]
    debian = sorted([c["name"], c["version"]] for c in components
                    if c.get("purl", "").startswith("pkg:deb/"))  # fmt: skip
    assert debian == image["debian"] and len(debian) > 50
    python = {(c["name"], c["version"]) for c in components
              if c.get("purl", "").startswith("pkg:pypi/")}  # fmt: skip
    assert python == {tuple(d) for d in image["python"]}
    names = {canonical(n) for n, _ in python}
    assert ("sglang", "0.5.23") in python and {"sglx-platform", "sglx-kernels"} <= names
    loose = {c["name"] for c in components if c["type"] == "file"}
    assert loose == set(image["loose"]), sorted(loose ^ set(image["loose"]))[:20]
    by_type = cpu_bundle_scan["data"]["sbom"]["components"]
    assert by_type["machine-learning-model"] == 1 and by_type["container"] == 1  # weights, base
    hashed = {
        (c["purl"].split("/", 1)[1].split("@")[0], c["version"]): c["hashes"][0]["content"]
        for c in components if c.get("hashes") and c.get("purl", "").startswith("pkg:pypi/")
    }  # fmt: skip
    lock = load_lock(load_profile("cpu"))
    # every locked wheel, by the hash the lock pins, and nothing else
    assert hashed == {(canonical(w.name), w.version): w.sha256 for w in lock.wheels}
    # The same SBOM as SPDX 2.3 (`bundle sbom --format spdx`), valid by the SPDX project's own
    # tool, one package per component besides the image.
    from sglx.sbom.spdx import from_cyclonedx

    spdx = Path(cpu_bundle_scan["data"]["sbom"]["path"]).with_suffix(".spdx.json")
    spdx.write_text(from_cyclonedx(text, where="sbom"))
    checked = subprocess.run([str(Path(sys.executable).with_name("pyspdxtools")), "-i", str(spdx)],
                             capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert len(json.loads(spdx.read_text())["packages"]) == len(components) + 1


@dataclass(frozen=True)
class Started:
    """The module's server container: its `docker run` line (the run spec's), name, URL and
    node-local JIT cache folder."""

    words: list[str]
    name: str
    base: str
    folder: Path


def start(docker: Any, started: Started) -> Any:
    """Run the line (detached) and wait for /health; the container."""
    done = subprocess.run(started.words, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    container = docker.containers.get(started.name)

    def alive() -> bool:
        return bool(docker.containers.get(started.name).status == "running")

    wait_healthy(started.base, timeout=600, alive=alive)
    return container


@pytest.fixture(scope="module")
def started(
    docker: Any, cpu_image: dict, run_id: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Started]:
    """The cpu image started as the run spec says, on a published port of 127.0.0.1, with its
    node-local JIT cache folder under a folder of the test, made as install.sh makes it."""
    spec = run_spec(load_profile("cpu"))
    site = Site(
        image=cpu_image["tag"],
        name=f"sglx-test-cpu-{run_id}",
        host_port=free_port(),
        publish_address="127.0.0.1",
        image_id=docker.images.get(cpu_image["tag"]).id,
        jit_root=str(tmp_path_factory.mktemp("jit")),
    )
    folder = jit_folder(spec, site)
    assert folder is not None
    make_jit_folder(spec, folder)
    line = Started(
        docker_run_words(spec, site), site.name, f"http://127.0.0.1:{site.host_port}", Path(folder)
    )
    try:
        start(docker, line)
        yield line
    except BaseException:
        logs = subprocess.run(["docker", "logs", site.name], capture_output=True, text=True)
        print((logs.stdout + logs.stderr)[-5000:])
        raise
    finally:
        subprocess.run(["docker", "rm", "-f", site.name], capture_output=True, check=False)


@pytest.fixture(scope="module")
def served(
    docker: Any, started: Started, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, Path, Any]:
    container = docker.containers.get(started.name)
    # The baked weights, copied out to compare with transformers on the same bytes.
    model = tmp_path_factory.mktemp("baked")
    stream, _ = container.get_archive("/models/model")
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
        tar.extractall(model, filter="data")
    return started.base, model / "model", container


def test_container_answers_health_and_models(served: tuple[str, Path, Any]) -> None:
    base, _, _ = served
    assert http(f"{base}/health")[0] == 200
    status, listing = http(f"{base}/v1/models")
    assert status == 200
    assert [m["id"] for m in listing["data"]] == ["demo"]


def test_greedy_completion_matches_transformers_on_the_baked_weights(
    served: tuple[str, Path, Any],
) -> None:
    from transformers import AutoTokenizer

    base, model, _ = served
    tokenizer = AutoTokenizer.from_pretrained(model)
    prompts = ["Hello, world!", "Pack my box with"]
    for prompt, want in zip(prompts, transformers_greedy(model, prompts, 12), strict=True):
        status, body = http(
            f"{base}/v1/completions",
            {"model": "demo", "prompt": prompt, "max_tokens": 12, "temperature": 0},
        )
        assert status == 200, body
        assert body["choices"][0]["text"] == tokenizer.decode(want, skip_special_tokens=True)


def test_the_image_carries_its_golden_numerics_and_serves_them(
    docker: Any, cpu_image: dict, served: tuple[str, Path, Any]
) -> None:
    """The golden file the build computed from the demo checkpoint in float32, labelled with
    its digest, replayed through the running server from inside its container: the served
    float16 numbers are within the cpu profile's tolerance (issue 25)."""
    _, _, container = served
    label = docker.images.get(cpu_image["tag"]).labels[GOLDEN_LABEL]
    stream, _ = container.get_archive(f"/etc/sglx/{GOLDEN_FILE}")
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
        member = tar.extractfile(GOLDEN_FILE)
        assert member is not None
        raw = member.read()
    assert label == "sha256:" + hashlib.sha256(raw).hexdigest()
    port = load_profile("cpu").container.port
    url = f"http://127.0.0.1:{port}"
    replay = ["python", "-m", "sglx_runtime.golden_replay", "--url", url, "--digest", label]
    code, out = container.exec_run([*replay, "--json"])
    report = json.loads(out)
    assert code == 0, report
    assert report["data"]["served_dtype"] == "float16"  # sglang's auto for a float32 checkpoint
    assert report["data"]["top1_agreement"] == 1.0
    assert len(report["data"]["prompts"]) == len(BUILTIN_PROMPTS)


GATE_TICK = (
    Path(__file__).resolve().parents[2] / "ansible/roles/sglang_service/files/sglx-gate-tick.py"
)


def _gate_tick(
    started: Started, tmp: Path, *extra: str, container: str | None = None
) -> subprocess.CompletedProcess[str]:
    """The role's timer script as sglx-gate.service runs it, here against the test's container."""
    url = f"http://127.0.0.1:{load_profile('cpu').container.port}"
    return subprocess.run(
        [sys.executable, str(GATE_TICK), "--container", container or started.name, "--url", url,
         "--host", "host-a", "--unit", "sglx-server.service", "--textfile",
         str(tmp / "textfile" / "sglx_gate.prom"), "--record", str(tmp / "gate.json"), *extra],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


def _series(textfile: Path) -> dict[tuple[str, str], float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (sample.name, sample.labels.get("check", "")): sample.value
        for family in text_string_to_metric_families(textfile.read_text())
        for sample in family.samples
    }


def test_the_gate_timer_judges_the_served_numbers_and_writes_series_and_a_record(
    served: tuple[str, Path, Any], started: Started, tmp_path: Path
) -> None:
    """Issue 41: the cheap checks the host's timer runs (health, the golden replay), from the
    role's own script through `docker exec` into the container: the node exporter's textfile
    and the JSON record. A failing run alerts (the default policy), naming the check; a
    `restart` policy past its rate limit only alerts; a run that cannot judge (no container)
    writes its record and leaves the textfile as it was, so its timestamp ages."""
    done = _gate_tick(started, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "sglx-gate: host-a: numerics passed: the served numbers match" in done.stdout
    series = _series(tmp_path / "textfile" / "sglx_gate.prom")
    assert series[("sglx_gate_check_passed", "health")] == 1.0
    assert series[("sglx_gate_check_passed", "numerics")] == 1.0
    assert series[("sglx_gate_last_run_timestamp_seconds", "")] > 1.7e9
    record = json.loads((tmp_path / "gate.json").read_text())
    assert (record["passed"], record["judged"], record["actions"]) == (True, True, [])
    assert record["checks"]["numerics"]["passed"] is True

    # A memory bound the server is above (1 MiB): the engine's own figure (docker stats) fails
    # the memory check, and the series carry it.
    over = _gate_tick(started, tmp_path, "--memory-max-bytes", str(2**20))
    assert over.returncode == 1, over.stdout + over.stderr
    assert "host-a: memory FAILED: the container uses" in over.stdout, over.stdout
    assert "bound 0.00 GiB: above it" in over.stdout, over.stdout
    series = _series(tmp_path / "textfile" / "sglx_gate.prom")
    assert series[("sglx_gate_check_passed", "memory")] == 0.0
    assert series[("sglx_server_memory_bytes", "")] > 2**20

    # The speed check, due (no measurement before): the rollout's benchmark in the container,
    # against the site's floor, its series in a textfile of their own.
    timed = _gate_tick(started, tmp_path, "--speed-every", "3600",
                       "--speed-floors", '{"min_output_tok_s": 1}')  # fmt: skip
    assert timed.returncode == 0, timed.stdout + timed.stderr
    assert "host-a: speed passed:" in timed.stdout, timed.stdout
    speed = _series(tmp_path / "textfile" / "sglx_gate_speed.prom")
    assert speed[("sglx_gate_speed_passed", "")] == 1.0
    assert speed[("sglx_gate_speed_output_tokens_per_second", "")] > 1.0
    record = json.loads((tmp_path / "gate.json").read_text())
    assert record["checks"]["speed"]["passed"] and record["speed_at"] > 1.7e9, record
    assert ("sglx_gate_check_passed", "speed") not in _series(
        tmp_path / "textfile" / "sglx_gate.prom"
    )

    # A server that does not answer (a port nothing listens on, inside the container).
    wrong = subprocess.run(
        [sys.executable, str(GATE_TICK), "--container", started.name, "--url",
         "http://127.0.0.1:1", "--host", "host-a", "--unit", "sglx-server.service",
         "--textfile", str(tmp_path / "textfile" / "sglx_gate.prom"),
         "--record", str(tmp_path / "gate.json")],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert wrong.returncode == 1, wrong.stdout + wrong.stderr
    assert "host-a: health FAILED: /health did not answer" in wrong.stdout
    assert "remediation (alert): alert" in wrong.stdout
    series = _series(tmp_path / "textfile" / "sglx_gate.prom")
    assert series[("sglx_gate_check_passed", "health")] == 0.0
    assert series[("sglx_gate_check_passed", "numerics")] == 0.0

    # restart, with this window's one restart already taken: rate limited, no systemctl.
    now = json.loads((tmp_path / "gate.json").read_text())["finished_at"]
    taken = {"passed": False, "actions": [{"action": "restart", "at": now, "why": "earlier"}]}
    (tmp_path / "gate.json").write_text(json.dumps(taken))
    limited = _gate_tick(started, tmp_path, "--remediation", "restart", container="sglx-none")
    assert limited.returncode == 2, limited.stdout + limited.stderr
    assert "could not run the checks" in limited.stdout
    assert "rate limited" in limited.stdout
    record = json.loads((tmp_path / "gate.json").read_text())
    assert record["judged"] is False and len(record["actions"]) == 1
    # the textfile keeps the last judged run
    assert (
        _series(tmp_path / "textfile" / "sglx_gate.prom")[("sglx_gate_check_passed", "health")]
        == 0.0
    )


def test_the_image_benchmarks_its_server_with_sglangs_bench_serving(
    served: tuple[str, Path, Any],
) -> None:
    """The speed gate in the image (issue 25): sglang's own bench_serving, which imports
    `datasets` (in the image's lock for it), runs against the server at the cpu profile's
    gate.speed settings and every request completes; judged again from its record, with no
    second run, once the server's start time is given."""
    _, _, container = served
    port = load_profile("cpu").container.port
    gate = ["python", "-m", "sglx_runtime.speed_gate", "--url", f"http://127.0.0.1:{port}",
            "--host", "image-test", "--fleet", "test", "--json"]  # fmt: skip
    code, out = container.exec_run(gate, stderr=False)  # stderr: bench_serving's progress
    report = json.loads(out)
    assert code == 0, report
    (host,) = report["data"]["report"]["hosts"]
    speed = load_profile("cpu").gate.speed
    assert host["numbers"]["completed"] == speed.num_prompts, host
    assert host["numbers"]["output_tok_s"] > 0, host
    assert host["numbers"]["goodput"]["slos_ms"] == {
        "ttft": speed.slos.ttft_ms,
        "tpot": speed.slos.tpot_ms,
    }
    assert report["data"]["measured"] is True
    record = json.dumps(report["data"]["record"])
    # The peers' records on stdin (the gate's own, here): sh hands $0 to the gate's stdin.
    feed = ["sh", "-c", 'printf %s "$0" | "$@"', json.dumps({"image-test": record})]
    container.reload()
    started = ["--started-at", container.attrs["State"]["StartedAt"]]
    code, out = container.exec_run([*feed, *gate, "--peers", "-", *started], stderr=False)
    again = json.loads(out)
    assert code == 0, again
    assert again["data"]["measured"] is False
    assert again["data"]["record"] == report["data"]["record"]


def test_the_server_started_without_serving_flags_chose_the_cpu_profile(
    served: tuple[str, Path, Any],
) -> None:
    """sglx-serve read this machine's cores and memory and the demo model's config.json, chose
    the cpu arch's serving profile, said why, and handed its name to the server."""
    _, _, container = served
    logs = container.logs().decode()
    assert "sglx-serve: serving profile cpu-host (general): matches 1x cpu" in logs, logs[-3000:]
    assert ": fits." in logs  # the capacity check's numbers, before the server started
    code, state = container.exec_run(["cat", "/tmp/sglx-serve.json"])
    assert code == 0, state
    assert json.loads(state)["serving_profile"] == "cpu-host"


def test_the_printed_command_is_what_the_running_server_was_started_with(
    served: tuple[str, Path, Any],
) -> None:
    """Issue 37 item 3: `sglx-serve --dry-run`'s command, in the same container with the same
    environment, is word for word the /proc/PID/cmdline of the server sglx-serve started."""
    _, _, container = served
    code, out = container.exec_run(["sglx-serve", "--dry-run", "--json"], stderr=False)
    assert code == 0, out
    printed = json.loads(out)["command"]
    find = (
        "import pathlib; [print(p.read_bytes().decode()) for p in pathlib.Path('/proc')"
        ".glob('[0-9]*/cmdline') if b'\\0-m\\0sglang.launch_server\\0' in p.read_bytes()]"
    )
    code, out = container.exec_run(["python", "-c", find], stderr=False)
    assert code == 0, out
    # The server and any child it forked (forked children keep the parent's cmdline).
    running = [line.split("\0")[:-1] for line in out.decode().splitlines() if line]
    assert running and all(words == printed for words in running), (running, printed)


def test_the_jit_cache_folder_is_private_mounted_and_survives_a_restart(
    docker: Any, started: Started, served: tuple[str, Path, Any]
) -> None:
    """The node-local JIT cache folder of the image is mounted at the profile's target and
    named in the server's environment, owned by the container user with mode 0700. What the
    server's user writes there (as Triton does) is there after the container is removed and
    started again from the same line, as the systemd unit restarts it, and that second start
    adds no entry (the cpu server compiles nothing; on a GPU arch the entries are the kernels)."""
    container = docker.containers.get(started.name)
    [mount] = [m for m in container.attrs["Mounts"] if m["Destination"] == "/var/cache/sglx"]
    assert (mount["Source"], mount["RW"]) == (str(started.folder), True)
    assert f"{HOST_ENV}={started.folder}" in container.attrs["Config"]["Env"]
    info = started.folder.stat()
    assert (info.st_uid, info.st_mode & 0o7777) == (1000, 0o700)
    code, out = container.exec_run(
        ["sh", "-c", "mkdir -p /var/cache/sglx/triton/k && echo kernel >/var/cache/sglx/triton/k/x"]
    )
    assert code == 0, out
    before = cache_entries(started.folder)
    assert before == {"triton": -1, "triton/k": -1, "triton/k/x": 7}
    for argv in (["stop", "-t", "30", started.name], ["rm", started.name]):  # as the unit does
        subprocess.run(["docker", *argv], capture_output=True, check=True, timeout=60)
    start(docker, started)  # the one extra server start this adds
    assert http(f"{started.base}/health")[0] == 200
    assert cache_entries(started.folder) == before
    info = started.folder.stat()
    assert (info.st_uid, info.st_mode & 0o7777) == (1000, 0o700)


def test_a_cache_folder_others_can_write_stops_the_server_before_sglang(
    docker: Any, cpu_image: dict, run_id: str, tmp_path: Path
) -> None:
    """Mode 0777: sglx-serve refuses in seconds, exit 2, naming the host folder and the fix,
    before anything imports sglang (the server loads code from that folder)."""
    spec = run_spec(load_profile("cpu"))
    site = Site(
        image=cpu_image["tag"],
        name=f"sglx-test-cpu-jit-{run_id}",
        host_port=free_port(),
        publish_address="127.0.0.1",
        detached=False,
        image_id=docker.images.get(cpu_image["tag"]).id,
        jit_root=str(tmp_path),
    )
    folder = jit_folder(spec, site)
    assert folder is not None
    make_jit_folder(spec, folder)
    Path(folder).chmod(0o777)
    try:
        done = subprocess.run(
            docker_run_words(spec, site), capture_output=True, text=True, timeout=120
        )
    finally:
        subprocess.run(["docker", "rm", "-f", site.name], capture_output=True, check=False)
    log = done.stdout + done.stderr
    assert done.returncode == 2, log[-3000:]
    assert f"the JIT cache folder {folder} (mounted at /var/cache/sglx) has mode 0777" in log
    assert re.search(rf"chown 1000:\d+ {re.escape(folder)} && chmod 0700 {re.escape(folder)}", log)
    assert "sglang.launch_server" not in log and "Traceback" not in log


def test_dry_run_prints_the_command_and_where_each_value_came_from(
    docker: Any, cpu_image: dict
) -> None:
    """`docker run IMAGE --dry-run`: nothing starts; the final launch_server command, the
    environment the serving profile adds, and the layer that set each value."""
    tag = cpu_image["tag"]
    argv = ["--dry-run", "--json", "--context-length", "256"]
    document = json.loads(docker.containers.run(tag, argv, remove=True, network_mode="none"))
    assert document["selected"] == "cpu-host"
    assert document["command"][1:3] == ["-m", "sglang.launch_server"]
    assert document["command"][-2:] == ["--context-length", "256"]
    assert document["env"] == {"SGLX_SERVING_PROFILE": "cpu-host"}
    layers = {item["name"]: (item["value"], item["layer"]) for item in document["settings"]}
    assert layers["--context-length"] == ("256", "user argument")
    assert layers["--device"] == ("cpu", "arch default")
    assert document["capacity"]["fits"] is True
    text = docker.containers.run(tag, ["--dry-run"], remove=True, network_mode="none").decode()
    assert "--device cpu <- arch default" in text
    assert "sglang.launch_server --model-path /models/model" in text


def test_a_context_that_cannot_fit_is_refused_before_any_weight_loads(
    docker: Any, cpu_image: dict
) -> None:
    """Two billion tokens of KV cache (about 477 GiB for the demo model) fit on no machine
    this runs on: sglx-serve refuses with the numbers and the fixes, exit 2, and the server
    never starts."""
    container = docker.containers.run(
        cpu_image["tag"], ["--context-length", "2000000000"], detach=True, network_mode="none"
    )
    try:
        code = container.wait(timeout=120)["StatusCode"]
        logs = container.logs().decode()
    finally:
        container.remove(force=True)
    assert code == 2, logs[-3000:]
    assert "refused before starting the server: the model does not fit" in logs
    assert "2,000,000,000 tokens of context x 1 request" in logs
    assert "Use --context-length" in logs
    assert "sglang.launch_server" not in logs and "Traceback" not in logs


def test_rebuild_after_a_plugin_change_reuses_every_heavy_layer(
    docker: Any, cpu_image: dict, cpu_base: str, cpu_wheelhouse: Path, run_id: str
) -> None:
    original = PLUGIN_FILE.read_text()
    tag = f"sglx-test/cpu-rebuilt:{run_id}"
    try:
        PLUGIN_FILE.write_text(original + "\n# a plugin-only change made by the rebuild test\n")
        build(
            "--arch", "cpu", "--base", cpu_base, "--wheelhouse", str(cpu_wheelhouse), "--tag", tag
        )
    finally:
        PLUGIN_FILE.write_text(original)
    try:
        first = docker.images.get(cpu_image["tag"]).attrs["RootFS"]["Layers"]
        second = docker.images.get(tag).attrs["RootFS"]["Layers"]
        shared = next(
            (i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b),
            min(len(first), len(second)),
        )
        # base, runtime user, venv (GBs), weights and profile are the same layers; only sglx's
        # own wheels and their install step were rebuilt.
        assert shared == len(first) - 2
        assert len(second) == len(first)
    finally:
        remove_images(docker, tag)
