"""Acceptance host checks: after a rollout, each host runs the bundle, as the profile says,
and serves; and every host of a group runs the same thing.

What the server runs with is read from the running container and from its server process's
/proc (environment, argv), never from the unit file alone.
"""

from __future__ import annotations

import json
import shlex
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import testinfra
from facts import HostFacts, host_facts
from probes import (
    below_floor,
    bundle_image_ids,
    bundle_manifest,
    container_inspect,
    content_image_id,
    deployed_image_ids,
    differences,
    docker,
    fingerprint,
    held_image,
    image_arch,
    install_record,
    last_refusal,
    odd_keys,
    odd_nodes,
    problem,
    read_json,
    server_process,
)

from sglx_core.env_floors import switched_on
from sglx_core.errors import SglxError
from sglx_core.gate.speed import DEFAULT_FRACTION, judge
from sglx_core.gate.speed_record import (
    SpeedRecord,
    fleet_key,
    floors_of,
    parse_record,
    settings_of,
)
from sglx_core.jit_cache import host_folder

pytestmark = pytest.mark.acceptance

ROLLOUT = "run rollout.yml for this host"
# sglx_runtime.serving.PROFILE_ENV: the name sglx-serve gives the server (the checks do not
# import the plugin, which runs in the image).
SERVING_PROFILE_ENV = "SGLX_SERVING_PROFILE"
# A passed check's detail, shown by `sglx hosts check` (sglx.hosts.junit reads it back).
DETAIL_PROPERTY = "detail"


def running_container(host: Any, facts: HostFacts) -> dict[str, Any]:
    """The server container's inspect record; the check is skipped (not failed again) when the
    container is not running, which service_active reports once."""
    inspect = container_inspect(host, facts)
    if inspect is None or not inspect["State"]["Running"]:
        pytest.skip(f"container {facts.container} is not running (see service_active)")
    return inspect


def test_bundle_image_present(host: Any, facts: HostFacts, bundle_dir: Path | None) -> None:
    deployed = read_json(host, str(facts["sglang_service_state_file"]))
    if bundle_dir is not None:
        manifest, digest = bundle_manifest(bundle_dir)
        image, ids = str(manifest["image"]["id"]), bundle_image_ids(manifest)
        running = (deployed or {}).get("bundle_digest", "(none recorded)")
        if running != digest:
            problem(f"runs bundle {running}, not {digest}", ROLLOUT)
    elif deployed is None:
        problem(f"{facts['sglang_service_state_file']} is missing: no rollout passed here", ROLLOUT)
    else:
        image, ids = str(deployed.get("image_id", "")), deployed_image_ids(deployed)
    held = held_image(host, ids)
    arch = None if held is None else image_arch(host, held)
    if arch is None:
        problem(f"the engine lacks image {image}", ROLLOUT)
    if arch != facts.arch:
        problem(
            f"image {image[:19]} is a {arch} image, this host is {facts.arch}",
            f"roll out a {facts.arch} bundle",
        )
    digest = digest if bundle_dir is not None else (deployed or {}).get("bundle_digest")
    if isinstance(digest, str):
        path, record = install_record(host, facts, digest)
        if record is None or record["image_id"] != image:
            problem(
                f"no install record says bundle {digest} is installed with image {image[:19]} "
                f"({path})",
                f"{ROLLOUT} (or install the bundle with `sh install.sh` or `sglx bundle "
                "install`, both with the state folder bundle_install_state_dir)",
            )


def test_service_active(host: Any, facts: HostFacts) -> None:
    service = host.service(facts.service)
    state = []
    if not service.is_enabled:
        state.append("not enabled")
    if not service.is_running:
        state.append("not active")
    inspect = container_inspect(host, facts)
    if inspect is None or not inspect["State"]["Running"]:
        state.append(f"container {facts.container} not running")
    if state:
        problem(
            f"{facts.service}: {', '.join(state)}",
            f"systemctl enable --now {facts.service}, or {ROLLOUT}",
        )


def test_driver_validated_with_the_image(host: Any, facts: HostFacts) -> None:
    """The driver this host runs is the one its serving gate last passed with (the record's
    driver_version, sglang_service tasks/record.yml): an upgraded driver has not been validated
    with the image until a rollout runs the gate again (seed S0-49). Skipped where the arch's
    driver reports no version file, the driver is not loaded, or the record predates it."""
    version_file = str((facts["accel_host_driver"] or {}).get("version_file") or "")
    if not version_file:
        pytest.skip(f"the {facts.arch} profile names no driver version file")
    deployed = read_json(host, str(facts["sglang_service_state_file"])) or {}
    validated = str(deployed.get("driver_version") or "")
    if not validated:
        pytest.skip("the record of the last passed gate names no driver (an older rollout)")
    file = host.file(version_file)
    if not file.exists:
        pytest.skip(f"{version_file} is absent: the driver is not loaded (see driver_minimum)")
    running = (file.content_string.splitlines() or [""])[0].strip()[:120]
    if running != validated:
        image = str(deployed.get("image_id", ""))[:19]
        problem(
            f"the driver reads {running!r} ({version_file}); the serving gate last passed here "
            f"with {validated!r} and image {image}: this pair has not been validated",
            f"{ROLLOUT}: it runs the serving gate again on this host (and rolls back when it "
            f"fails); or return the driver to {validated}",
        )


def test_running_container_devices(host: Any, facts: HostFacts) -> None:
    """The container has the profile's device nodes and groups (what `docker run` got)."""
    inspect = running_container(host, facts)
    have = {d["PathOnHost"] for d in inspect["HostConfig"].get("Devices") or []}
    wrong = []
    for device in facts["sglang_service_devices"]:
        present = host.run(f"ls -d {device['path']} 2>/dev/null").stdout.split()
        paths = [p for p in present if host.file(p).is_directory is False] or present
        if device["required"] and not present:
            wrong.append(f"{device['path']} is missing on the host")
        for path in paths:
            if not any(h == path or h.startswith(path.rstrip("/") + "/") for h in have):
                wrong.append(f"{path} is not passed to the container")
    added = set(inspect["HostConfig"].get("GroupAdd") or [])
    for group in facts["sglang_service_groups"]:
        gid = str(host.group(group).gid) if host.group(group).exists else None
        if group not in added and gid not in added:
            wrong.append(f"group {group} is not added to the container")
    if wrong:
        problem("; ".join(wrong), ROLLOUT)


def test_running_server_environment(host: Any, facts: HostFacts) -> None:
    """The server process's own environment has the profile's values (GPU_MAX_HW_QUEUES and
    SGLANG_PLATFORM among them), no forbidden variable, and the queue count its flags need."""
    running_container(host, facts)
    server = server_process(host, facts)
    if not server:
        problem(f"no sglang server process runs in {facts.container}", ROLLOUT)
    env: dict[str, str] = server["env"]
    wanted = {**facts["sglang_service_env"], **facts["accel_host_service_env"]}
    floors = facts.profile.env_floors.items()
    switched = {key: f for key, f in floors if switched_on(f, env)}
    # A switched-on feature's variable is checked against its minimum below, not the host's
    # tuned value (the service raises GPU_MAX_HW_QUEUES to 5 for multi-stream MoE).
    for floor in switched.values():
        wanted.pop(floor.name, None)
    wrong = [
        f"{k}={env.get(k, '(unset)')}, not {v}"
        for k, v in sorted(wanted.items())
        if env.get(k) != str(v)
    ]
    wrong += [
        f"{k} is set ({env[k]}), which the profile forbids"
        for k in facts["sglang_service_env_forbidden"]
        if k in env
    ]
    wrong += [below_floor(key, floor, env) for key, floor in switched.items()]
    wrong = [w for w in wrong if w]
    if wrong:
        problem(f"server pid {server['pid']} in {facts.container}: {'; '.join(wrong)}", ROLLOUT)


def test_serving_profile_selected(host: Any, facts: HostFacts, record_property: Any) -> None:
    """The serving profile the host's server started with (sglx-serve chose it from the host's
    devices and the model, and hands its name to the server as SGLX_SERVING_PROFILE): reported
    per host in the check's detail. A group of hosts that chose differently is named by
    group_runs_the_same, and a serving group's ranks refuse to form (SGLX_ is compared)."""
    running_container(host, facts)
    server = server_process(host, facts)
    if not server:
        problem(f"no sglang server process runs in {facts.container}", ROLLOUT)
    chosen = server["env"].get(SERVING_PROFILE_ENV)
    if facts.profile.serving.profiles and not chosen:
        problem(
            f"the server in {facts.container} started without a serving profile "
            f"({SERVING_PROFILE_ENV} is unset): its image's sglx-serve predates serving "
            "profiles, or the container's entrypoint was replaced",
            f"roll out a bundle built by this sglx, or {ROLLOUT}",
        )
    record_property(DETAIL_PROPERTY, f"serving profile {chosen or 'none (the arch has none)'}")


def test_running_container_shares_the_device_init_lock(host: Any, facts: HostFacts) -> None:
    """The container mounts the profile's host folder of the device-init lock, and its server
    process names it in SGLX_LOCK_DIR: no two servers of the host bring devices up at once."""
    lock = facts["sglang_service_lock_dir"]
    inspect = running_container(host, facts)
    wrong = []
    mounted = {
        m.get("Destination"): m.get("Source")
        for m in inspect.get("Mounts") or []
        if m.get("Type") == "bind"
    }
    if mounted.get(lock["target"]) != lock["source"]:
        where = mounted.get(lock["target"])
        wrong.append(
            f"{lock['source']} is not mounted at {lock['target']}"
            + (f" ({where} is)" if where else "")
        )
    env = server_process(host, facts).get("env") or dict(
        item.split("=", 1) for item in inspect["Config"].get("Env") or [] if "=" in item
    )
    wrong += [
        f"{name}={env.get(name, '(unset)')}, not {value}"
        for name, value in sorted(lock["env"].items())
        if env.get(name) != value
    ]
    if wrong:
        problem(f"{facts.container}: {'; '.join(wrong)}", ROLLOUT)


def test_running_container_mounts_its_jit_cache(host: Any, facts: HostFacts) -> None:
    """The running image's node-local JIT cache folder (<root>/<image id hex>) is on the host,
    a folder owned by the container's uid with mode 0700, and is what the container has
    mounted at the profile's target: the server loads code from it, and a restart finds it warm.
    """
    cache = facts["sglang_service_jit_cache"]
    if not cache:
        pytest.skip("the profile has no node-local JIT cache (vars rendered before it existed)")
    inspect = running_container(host, facts)
    root = str(facts.vars.get("sglang_service_jit_cache_root") or cache["host_root"])
    folder = host_folder(root, content_image_id(host, facts, inspect))
    wrong = []
    found = host.file(folder)
    if found.is_symlink or (found.exists and not found.is_directory):
        wrong.append(f"{folder} is not a folder")
    elif not found.exists:
        wrong.append(f"{folder} does not exist")
    else:
        if found.uid != cache["uid"]:
            wrong.append(f"{folder} is owned by uid {found.uid}, not {cache['uid']}")
        if found.mode != int(str(cache["mode"]), 8):
            wrong.append(f"{folder} has mode {found.mode:04o}, not {cache['mode']}")
    mounted = {
        m.get("Destination"): m.get("Source")
        for m in inspect.get("Mounts") or []
        if m.get("Type") == "bind"
    }
    if mounted.get(cache["target"]) != folder:
        where = mounted.get(cache["target"])
        wrong.append(
            f"{folder} is not mounted at {cache['target']}" + (f" ({where} is)" if where else "")
        )
    if wrong:
        problem(
            f"{facts.container}: {'; '.join(wrong)}",
            f"{ROLLOUT} (it creates the folder, owned by uid {cache['uid']}, mode "
            f"{cache['mode']}, and restarts the server with it mounted)",
        )


# Run on the host (python3 is there for Ansible): /health; the second adds a one-token completion.
_HEALTH_PROBE = """
import json, sys, urllib.request as u
url = sys.argv[1]
print(u.urlopen(url + "/health", timeout=30).status)
"""
_COMPLETION_PROBE = (
    _HEALTH_PROBE
    + """
body = {"model": "default", "prompt": "Hello", "max_tokens": 1, "temperature": 0}
r = u.Request(url + "/v1/completions", data=json.dumps(body).encode(), method="POST",
              headers={"Content-Type": "application/json"})
print(json.dumps(json.load(u.urlopen(r, timeout=120))["choices"][0]))
"""
)


def test_health_and_completion(host: Any, facts: HostFacts) -> None:
    """/health, then a one-token completion; a serving group answers completions through its
    rank 0, so its other nodes answer /health only."""
    running_container(host, facts)
    url = facts.server_url
    probe = _COMPLETION_PROBE if facts.node_rank == 0 else _HEALTH_PROBE
    done = host.run(f"python3 -c {shlex.quote(probe)} {shlex.quote(url)}")
    if done.rc != 0:
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no answer"]
        asked = "/health or a one-token completion" if facts.node_rank == 0 else "/health"
        problem(
            f"{url}: {asked} failed: {last[0][:200]}",
            f"journalctl -u {facts.service}; {ROLLOUT}",
        )
    if facts.node_rank == 0:
        json.loads(done.stdout.splitlines()[-1])


# Run on the host: the server's metrics route, what a site's Prometheus scrapes.
_METRICS_PROBE = """
import sys, urllib.request as u
print(u.urlopen(sys.argv[1], timeout=30).read(4 << 20).decode("utf-8", "replace"))
"""


def test_metrics_served(host: Any, facts: HostFacts) -> None:
    """The server's metrics (docs/reference/observability.md), as the site's Prometheus scrapes
    them: sglang's series and sglx's, naming this host's arch and what it runs (the image id
    and the bundle of the last passed gate). Rank 0 of a serving group serves them; skipped
    where the profile or the inventory turns metrics off."""
    path = str(facts.vars.get("sglang_service_metrics_path") or "")
    on = facts.flag("sglang_service_metrics", default=True)
    if not path or not on or facts.node_rank != 0:
        why = "not rank 0 of its serving group" if path and on else "metrics are off"
        pytest.skip(f"{facts.name}: {why}")
    inspect = running_container(host, facts)
    image = content_image_id(host, facts, inspect)
    bundle = (read_json(host, str(facts["sglang_service_state_file"])) or {}).get("bundle_digest")
    url = facts.server_url + path
    done = host.run(f"python3 -c {shlex.quote(_METRICS_PROBE)} {shlex.quote(url)}")
    text = done.stdout if done.rc == 0 else ""
    missing = [
        what
        for what, seen in (
            ("sglang's series", "\nsglang:" in text),
            (f'sglx_info of arch "{facts.arch}"', f'arch="{facts.arch}"' in text),
            (f"sglx_info of image {image[:19]}", f'image_id="{image}"' in text),
            (f"sglx_info of bundle {bundle}", not bundle or f'bundle_digest="{bundle}"' in text),
            ("sglx_server_start_time_seconds", "\nsglx_server_start_time_seconds " in text),
        )
        if not seen
    ]
    if missing:
        last = (done.stderr or "").strip().splitlines()[-1:] or [", ".join(missing) + " missing"]
        problem(
            f"{url}: {last[0][:200]}",
            f"{ROLLOUT} (the unit starts the server with its metrics; sglang_service_metrics: "
            "false turns them off)",
        )


def test_served_numerics(host: Any, facts: HostFacts, record_property: Any) -> None:
    """The serving gate's numerics (docs/reference/gate.md): the image's golden file, replayed
    teacher-forced through the server from inside its container, stays within the arch
    profile's tolerance for the dtype it serves in. A host whose weights, kernels or model
    settings drift is named with the prompt and the token positions, though /health and a
    completion pass. A serving group replays through rank 0."""
    if facts.node_rank != 0:
        pytest.skip(f"{facts.name} is not rank 0 of its serving group: rank 0 replays")
    if not facts.flag("sglang_service_gate_numerics"):
        pytest.skip("sglang_service_gate_numerics is false for this host: the replay is off")
    inspect = running_container(host, facts)
    # The container's own port on the bridge network; on the host network (a serving group)
    # the server listens on the host port.
    on_host = inspect["HostConfig"]["NetworkMode"] == "host"
    port = facts["sglang_service_host_port" if on_host else "sglang_service_port"]
    url = f"http://127.0.0.1:{port}"
    done = docker(host, "exec", facts.container, "python", "-m", "sglx_runtime.golden_replay",
                  "--url", url, "--host", facts.name, "--json")  # fmt: skip
    try:
        report = json.loads(done.stdout)
    except ValueError:
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        problem(
            f"the golden-numerics replay in {facts.container} did not run: {last[0][:300]}",
            f"is the image built by this sglx (it carries /etc/sglx/golden.json)? {ROLLOUT}",
        )
    said = [item["message"] for item in report.get("findings", []) + report.get("errors", [])]
    if done.rc != 0:
        problem("; ".join(said) or f"the replay exited {done.rc}", f"journalctl -u "
                f"{facts.service}; compare this host's model, --dtype and overrides with its "
                f"peers', then {ROLLOUT}")  # fmt: skip
    data = report["data"]
    record_property(
        DETAIL_PROPERTY,
        f"{data['served_dtype']}: top-1 {data['top1_agreement']:.3f}, mean |Δ| "
        f"{data['mean_abs']:.2e}, max |Δ| {data['max_abs']:.2e} over {len(data['prompts'])} "
        "prompts",
    )


def test_served_speed(host: Any, facts: HostFacts, request: pytest.FixtureRequest,
                      record_property: Any) -> None:  # fmt: skip
    """The serving gate's speed (docs/reference/gate.md): the benchmark this host passed in its
    last gate (its record, sglang_service_gate_speed_record), judged again beside the records
    of every checked host of its fleet (one image, one set of server arguments): a host below
    the fraction of the fleet's median output tok/s, or below a floor, is named. The detail
    holds its numbers. A serving group is measured through rank 0."""
    if facts.node_rank != 0:
        pytest.skip(f"{facts.name} is not rank 0 of its serving group: rank 0 is measured")
    if not facts.flag("sglang_service_gate_speed"):
        pytest.skip("sglang_service_gate_speed is false for this host: the benchmark is off")
    inspect = running_container(host, facts)
    records = _speed_records(
        tuple(_same_arch_hosts(request.config, facts)),
        request.config.getoption("ansible_inventory"),
        str(facts["sglang_service_gate_speed_record"]),
    )
    mine = records.get(facts.name)
    if mine is None:
        problem(
            f"{facts['sglang_service_gate_speed_record']} is missing: no speed gate passed here",
            f"roll out with sglang_service_gate_speed true: {ROLLOUT}",
        )
    if isinstance(mine, SglxError):
        problem(mine.message, mine.hint or ROLLOUT)
    running = fleet_key(content_image_id(host, facts, inspect), inspect["Args"] or [])
    if mine.fleet != running:
        problem(
            f"the last speed record ({mine.measured_at}) measured fleet {mine.fleet}, not the "
            f"server that runs here ({running}: another image or other server arguments): the "
            "gate did not measure what this host serves",
            ROLLOUT,
        )
    try:
        settings = settings_of(facts.profile, facts["sglang_service_gate_speed_slos"] or {})
        floors = floors_of(facts.profile, facts["sglang_service_gate_speed_floors"] or {})
        fleet = {
            name: record.result(settings)
            for name, record in records.items()
            if isinstance(record, SpeedRecord) and record.fleet == mine.fleet
        }
    except SglxError as error:
        problem(error.message, error.hint or ROLLOUT)
    fraction = str(facts["sglang_service_gate_speed_fraction"] or "")
    report = judge(
        fleet,
        fraction=float(fraction) if fraction else DEFAULT_FRACTION,
        fleet=dict.fromkeys(fleet, mine.fleet),
        floors=floors,
    )
    (verdict,) = (v for v in report.verdicts if v.host == facts.name)
    failed = [check for check in verdict.checks if check.outcome == "failed"]
    if failed:
        problem("; ".join(c.message for c in failed), failed[0].hint or ROLLOUT)
    r, ratio = verdict.result, verdict.ratio
    record_property(
        DETAIL_PROPERTY,
        f"{r.output_tok_s:.1f} output tok/s"
        + (
            f" (a fleet of {verdict.fleet_size}: judged by the floors only)"
            if ratio is None
            else f" ({ratio:.2f} of the fleet median {verdict.median_output_tok_s:.1f})"
        )
        + f", TTFT p50/p99 {r.ttft_ms_p50:.0f}/{r.ttft_ms_p99:.0f} ms, TPOT mean/p99 "
        f"{r.tpot_ms_mean:.1f}/{r.tpot_ms_p99:.1f} ms, {r.completed}/{r.num_prompts} completed, "
        + ("" if r.slo_attainment is None else f"goodput {r.slo_attainment:.3f}, ")
        + f"measured {mine.measured_at}",
    )


def _same_arch_hosts(config: pytest.Config, facts: HostFacts) -> list[str]:
    """The checked hosts of `facts`'s arch, in inventory order."""
    arch = config.getoption("--sglx-arch")
    return [
        name
        for name in _checked_hosts(config)
        if (arch or _runner(config).get_variables(name).get("sglx_arch")) == facts.arch
    ]


@cache
def _speed_records(
    names: tuple[str, ...], inventory: str | None, default_path: str
) -> dict[str, SpeedRecord | SglxError]:
    """Each host's speed record (a malformed one as its error; none when it has none)."""
    records: dict[str, SpeedRecord | SglxError] = {}
    for name in names:
        other = testinfra.get_host(f"ansible://{name}", ansible_inventory=inventory, sudo=True)
        path = other.ansible.get_variables().get("sglang_service_gate_speed_record") or default_path
        file = other.file(path)
        if not file.exists:
            continue
        try:
            records[name] = parse_record(name, file.content_string)
        except SglxError as error:
            records[name] = error
    return records


def test_serving_group_forms(host: Any, facts: HostFacts) -> None:
    """The nodes of a serving group agreed on their configuration when they last started: the
    server's log (its unit's journal) has no refusal of the rank check after its last
    agreement. A node that differs is named, with the keys and values the ranks compared: a
    group whose nodes differ never serves, so no running fingerprint is left to compare."""
    members = facts.serving_group
    if len(members) < 2:
        pytest.skip(f"{facts.name} serves alone")
    log = host.run(f"journalctl -u {shlex.quote(facts.service)} -n 3000 -o cat --no-pager")
    if log.rc != 0:
        pytest.skip(f"no journal of {facts.service} to read")
    refusal = last_refusal(log.stdout)
    if refusal is None:
        return
    odd = odd_nodes(refusal, members)
    mine = odd.get(facts.name)
    if not mine:
        named = ", ".join(sorted(odd)) or "a node"
        pytest.skip(f"serving group {facts.vars['sglang_service_group']} refuses: {named} differs")
    problem(
        f"{facts.name} (node rank {facts.node_rank} of serving group "
        f"{facts.vars['sglang_service_group']}) differs from its group in {differences(mine)}, and "
        "the group refuses to start",
        f"make it match (its inventory or a hand edit differs), then {ROLLOUT}",
    )


def _runner(config: pytest.Config) -> Any:
    from testinfra.utils.ansible_runner import AnsibleRunner

    return AnsibleRunner.get_runner(config.getoption("ansible_inventory"))


def _checked_hosts(config: pytest.Config) -> list[str]:
    """The hosts of this run (as testinfra expands --hosts), in inventory order."""
    from testinfra.utils.ansible_runner import itergroup

    runner = _runner(config)
    patterns = (config.getoption("hosts") or "ansible://all").split(",")
    names: set[str] = set()
    for pattern in patterns:
        names.update(runner.get_hosts(pattern.removeprefix("ansible://")))
    return [name for name in dict.fromkeys(itergroup(runner.inventory, "all")) if name in names]


@cache
def _group_fingerprints(
    names: tuple[str, ...], inventory: str | None, arch: str | None
) -> dict[str, dict[str, str]]:
    """Fingerprints of the hosts whose server runs (one that does not fails service_active)."""
    prints = {}
    for name in names:
        other = testinfra.get_host(f"ansible://{name}", ansible_inventory=inventory, sudo=True)
        other_facts = host_facts(name, other.ansible.get_variables(), arch)
        inspect = container_inspect(other, other_facts)
        if inspect is not None and inspect["State"]["Running"]:
            prints[name] = fingerprint(other, other_facts)
    return prints


def test_group_runs_the_same(host: Any, facts: HostFacts, request: pytest.FixtureRequest) -> None:
    """Every checked host of the same arch runs the same bundle, image, server flags and
    environment (per-node ones left out); a host that differs is named with those keys. Each
    key's reference is the value most hosts have; on a tie, the group's first host in inventory
    order (the one a serving group makes rank 0)."""
    running_container(host, facts)
    config = request.config
    arch = config.getoption("--sglx-arch")
    group = _same_arch_hosts(config, facts)
    if len(group) < 2:
        pytest.skip(f"{facts.name} is the only checked host of its group")
    prints = _group_fingerprints(tuple(group), config.getoption("ansible_inventory"), arch)
    group = [name for name in group if name in prints]
    if facts.name not in prints or len(group) < 2:
        pytest.skip(f"no other server of {facts.name}'s group runs to compare with")
    odd = odd_keys(prints[facts.name], prints, group)
    if odd:
        others = ", ".join(n for n in group if n != facts.name)
        problem(
            f"{facts.name} differs from the rest of its group ({others}) in {differences(odd)}",
            f"make it match (its inventory or a hand edit differs), then {ROLLOUT}",
        )
