"""What the checks read from a host: files, the engine, the running container and its server.

Every read goes through testinfra's `host` (SSH, as root with --sudo), so a check sees the
host as it is, not as a playbook configured it.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import pytest
from facts import HostFacts

from sglx_core.env_floors import below
from sglx_core.observability import DEPLOYMENT_ENV

# Runs inside the server container: the sglang server process's argv and environment, read
# from /proc (what the process runs with, not what its unit or image declares).
_SERVER_PROBE = r"""
import json, os
def read(pid, name):
    with open(f"/proc/{pid}/{name}", "rb") as f:
        return [p.decode(errors="replace") for p in f.read().split(b"\0") if p]
found = {}
for pid in sorted(int(p) for p in os.listdir("/proc") if p.isdigit()):
    try:
        argv = read(pid, "cmdline")
        if "sglang.launch_server" in argv:
            env = dict(e.split("=", 1) for e in read(pid, "environ") if "=" in e)
            found = {"pid": pid, "argv": argv, "env": env}
            break
    except OSError:
        continue
# What the plugin compared across the server's ranks (sglx_platform.consistency), lowest rank.
import glob, tempfile
for path in sorted(glob.glob(os.path.join(tempfile.gettempdir(), "sglx-fingerprint-rank*.json"))):
    try:
        with open(path) as f:
            found["fingerprint"] = json.load(f)["fingerprint"]
        break
    except (OSError, ValueError, KeyError):
        continue
print(json.dumps(found))
"""

# Set per container by the engine, never compared (the profile's ranks lists hold the rest).
CONTAINER_ENV = frozenset({"HOSTNAME", "HOME"})
# The environment's copies of the image id and the bundle digest (sglx_info's labels): the
# fingerprint compares the image and the bundle themselves, from the engine and the record.
DEPLOYMENT_KEYS = frozenset(f"env:{name}" for name in DEPLOYMENT_ENV.values())


def problem(what: str, fix: str) -> NoReturn:
    """Fail the check with one line: what is wrong on this host, then how to fix it."""
    pytest.fail(f"{what}. Fix: {fix}", pytrace=False)


_CONNECTIONS: dict[str, tuple[str, str] | None] = {}
_SSH_CONNECT = re.compile(r"^(?:ssh: )?connect to host \S+ port \d+: ")


def connection_problem(host: Any) -> tuple[str, str] | None:
    """Why no command runs on `host` (what is wrong, the fix), or None when one does.

    Asked once per host and worker: the `connection` check reports it, and every other check
    of that host is skipped on it (conftest.py), so an unreachable host is one finding."""
    key = host.backend.get_pytest_id()
    if key not in _CONNECTIONS:
        _CONNECTIONS[key] = _probe_connection(host)
    return _CONNECTIONS[key]


def _probe_connection(host: Any) -> tuple[str, str] | None:
    try:
        done = host.run("true")
    except RuntimeError as exc:  # testinfra's SSH backend: ssh itself failed (exit 255)
        stderr = getattr(exc.args[0], "stderr", "") if exc.args else ""
        at = _ssh_address(host)
        return (
            f"unreachable over SSH at {at}: {_last_words(stderr or str(exc))}",
            f"check that the host is up and that sshd at {at} accepts the inventory's user and "
            "key (ansible_host, ansible_port, ansible_user)",
        )
    if done.rc == 0:
        return None
    as_root = " as root (sudo)" if getattr(host.backend, "sudo", False) else ""
    return (
        f"commands fail{as_root}: exit {done.rc}: {_last_words(done.stderr or done.stdout)}",
        "give the SSH user passwordless sudo, or pass --no-sudo when it logs in as root",
    )


def _ssh_address(host: Any) -> str:
    """HOST:PORT that testinfra's SSH backend connects to for this inventory host."""
    backend = host.backend
    try:
        inner = backend.ansible_runner.get_host(
            backend.host,
            ssh_config=backend.ssh_config,
            ssh_identity_file=backend.ssh_identity_file,
        )
        spec = inner.backend.host
        return f"{spec.name}:{spec.port or 22}"
    except AttributeError:  # not the Ansible backend over SSH: the inventory's own words
        variables = host.ansible.get_variables()
        name = variables.get("ansible_host", variables.get("inventory_hostname", "?"))
        return f"{name}:{variables.get('ansible_port', 22)}"


def _last_words(output: str) -> str:
    """The last line of an error output, as a clause: `ssh: connect to host 127.0.0.1 port 1:
    Connection refused` -> `connection refused`."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    text = _SSH_CONNECT.sub("", lines[-1] if lines else "no output").removeprefix("ssh: ")
    text = text.rstrip(".")
    return text[:1].lower() + text[1:]


def read_json(host: Any, path: str) -> dict[str, Any] | None:
    file = host.file(path)
    if not file.exists:
        return None
    try:
        value = json.loads(file.content_string)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def docker(host: Any, *args: str) -> Any:
    return host.run("docker " + " ".join(shlex.quote(a) for a in args))


def held_image(host: Any, ids: Sequence[str]) -> str | None:
    """The id the engine holds an image under, given its ids (a bundle's config digest and
    manifest digest: Docker's containerd image store finds an image by the second only);
    None when it holds none of them."""
    for image in filter(None, ids):
        done = docker(host, "image", "inspect", "--format", "{{.Id}}", image)
        if done.rc == 0 and done.stdout.strip():
            return image
    return None


def bundle_image_ids(manifest: dict[str, Any]) -> list[str]:
    """The ids a bundle.json names its image by: its config digest, then its manifest digest
    (absent from bundles made before it was recorded)."""
    image = manifest["image"]
    return [
        str(image["id"]),
        *([str(image["manifest_digest"])] if image.get("manifest_digest") else []),
    ]


def deployed_image_ids(deployed: dict[str, Any] | None) -> list[str]:
    """The ids the record of the last passed gate names the image by: the id the unit runs
    (`engine_image`, recorded since the containerd store is handled), then its config digest."""
    record = deployed or {}
    return [str(record[key]) for key in ("engine_image", "image_id") if record.get(key)]


def content_image_id(host: Any, facts: HostFacts, inspect: dict[str, Any]) -> str:
    """The config digest of the image a container runs: what names its JIT cache folder and
    what a group's hosts compare. The container names the id the engine holds it under (its
    manifest digest on Docker's containerd image store); the record of the last passed gate
    pairs the two."""
    running = str(inspect["Image"])
    deployed = read_json(host, str(facts["sglang_service_state_file"])) or {}
    if deployed.get("engine_image") == running and deployed.get("image_id"):
        return str(deployed["image_id"])
    return running


def image_arch(host: Any, image: str) -> str | None:
    """The arch an sglx image was built for (its io.sglx.arch label); None if it is absent."""
    done = docker(
        host, "image", "inspect", "--format", '{{index .Config.Labels "io.sglx.arch"}}', image
    )
    return done.stdout.strip() if done.rc == 0 else None


def container_inspect(host: Any, facts: HostFacts) -> dict[str, Any] | None:
    done = docker(host, "inspect", "--type", "container", facts.container)
    if done.rc != 0:
        return None
    found = json.loads(done.stdout)
    return found[0] if found else None


# One read of each host's server process per check run: the checks only read, and four of them
# look at the same process (a `docker exec` over SSH each time otherwise).
_SERVER_PROCESSES: dict[tuple[str, str], dict[str, Any]] = {}


def server_process(host: Any, facts: HostFacts) -> dict[str, Any]:
    """argv and environment of the container's `sglang.launch_server` process ({} if none)."""
    key = (facts.name, facts.container)
    if key not in _SERVER_PROCESSES:
        done = docker(host, "exec", facts.container, "python3", "-c", _SERVER_PROBE)
        _SERVER_PROCESSES[key] = json.loads(done.stdout or "{}") if done.rc == 0 else {}
    return _SERVER_PROCESSES[key]


def bundle_manifest(bundle: Path) -> tuple[dict[str, Any], str]:
    """bundle.json of a bundle folder on this machine, and the bundle's digest (its sha256)."""
    raw = (bundle / "bundle.json").read_bytes()
    return json.loads(raw), "sha256:" + hashlib.sha256(raw).hexdigest()


def install_record(host: Any, facts: HostFacts, digest: str) -> tuple[str, dict[str, Any] | None]:
    """The path of bundle `digest`'s install record on the host (sglx.bundle.record: the one
    record sglx bundle install, install.sh and the bundle_install role write), and the record
    when it says the bundle was installed."""
    from sglx.bundle.record import file_name, installed

    path = f"{facts['bundle_install_state_dir']}/{file_name(digest)}"
    found = read_json(host, path)
    return path, found if installed(found, digest) else None


def server_flags(argv: list[str]) -> dict[str, str]:
    """The server's flags after `-m sglang.launch_server`: {'--tp': '2', '--flag': ''}."""
    args = argv[argv.index("sglang.launch_server") + 1 :] if "sglang.launch_server" in argv else []
    flags: dict[str, str] = {}
    key = None
    for arg in args:
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            flags[name] = value if eq else ""
            key = None if eq else name
        elif key is not None:
            flags[key] = arg if not flags[key] else f"{flags[key]} {arg}"
    return flags


def fingerprint(host: Any, facts: HostFacts) -> dict[str, str]:
    """What must be the same on every host of a group: image, bundle, and what the server
    compared across its ranks (server arguments with their resolved defaults, weights digest,
    profile, package versions, environment), as the plugin wrote it at start. A server without
    that record (an older image) is fingerprinted from its argv and environment instead. The
    per-node values are left out either way, by the profile's `ranks` lists, and so are the
    environment's copies of the image id and the bundle digest (DEPLOYMENT_KEYS)."""
    found: dict[str, str] = {}
    inspect = container_inspect(host, facts)
    found["image"] = content_image_id(host, facts, inspect) if inspect else "(no container)"
    deployed = read_json(host, str(facts["sglang_service_state_file"])) or {}
    found["bundle"] = str(deployed.get("bundle_digest", "(none recorded)"))
    server = server_process(host, facts)
    if server.get("fingerprint"):
        found.update((k, v) for k, v in server["fingerprint"].items() if k not in DEPLOYMENT_KEYS)
        return found
    ranks = facts.profile.ranks
    per_node_flags = {"--" + name.replace("_", "-") for name in ranks.per_node_args}
    for flag, value in server_flags(server.get("argv", [])).items():
        if flag not in per_node_flags:
            found[f"arg:{flag}"] = value
    for name, value in server.get("env", {}).items():
        if name not in ranks.per_node_env and name not in CONTAINER_ENV:
            found[f"env:{name}"] = value
    return {k: v for k, v in found.items() if k not in DEPLOYMENT_KEYS}


def odd_keys(
    mine: dict[str, str], group: dict[str, dict[str, str]], order: list[str]
) -> dict[str, tuple[str, str]]:
    """Keys where this host's value is not the group's: the most common value, ties going to
    the host first in `order`. {key: (this host's value, the group's value)}."""
    keys = set(mine).union(*(fp.keys() for fp in group.values()))
    odd = {}
    for key in sorted(keys):
        usual = majority([group[h].get(key, "(unset)") for h in order])
        if mine.get(key, "(unset)") != usual:
            odd[key] = (mine.get(key, "(unset)"), usual)
    return odd


def majority(values: list[str]) -> str:
    """The most common of `values`; on a tie, the one that comes first."""
    counts = Counter(values)
    return next(v for v in values if counts[v] == max(counts.values()))


def differences(odd: dict[str, tuple[str, str]]) -> str:
    """How a host differs, key by key: "KEY: 'its value' here, 'the group's' on the others"."""
    return "; ".join(
        f"{k}: {mine!r} here, {usual!r} on the others" for k, (mine, usual) in odd.items()
    )


def below_floor(key: str, floor: Any, env: dict[str, str]) -> str:
    """'' when `env` meets the floor of a switched-on feature, else what is wrong."""
    if not below(floor, env):
        return ""
    value = env.get(floor.name)
    switched = " ".join(f"{n}={v}" for n, v in floor.when.items())
    return (
        f"{floor.name}={value or '(unset)'} with {switched}: needs {floor.minimum} "
        f"({key}: {floor.reason})"
    )


# What the plugin's rank check logs (sglx_platform.consistency): its agreement, or its refusal
# followed by one line per key, "KEY differs (rank 0 on HOST: VALUE; rank 1 on HOST: VALUE)".
AGREED = "ranks agree on their configuration"
REFUSED = "[sglx config_refused] ranks disagree on their configuration"
_DIFFERS = re.compile(r"(\S+) differs \((rank \d+ on .*)\)\s*$")
_PER_RANK = re.compile(r"rank (\d+) on [^:]*: (.*?)(?=; rank \d+ on |$)")


def last_refusal(log: str) -> dict[str, dict[int, str]] | None:
    """The keys and per-rank values of the last refusal, if no agreement came after it."""
    lines = log.splitlines()
    refused = max((i for i, line in enumerate(lines) if REFUSED in line), default=-1)
    agreed = max((i for i, line in enumerate(lines) if AGREED in line), default=-1)
    if refused < 0 or agreed > refused:
        return None
    keys: dict[str, dict[int, str]] = {}
    for line in lines[refused + 1 :]:
        found = _DIFFERS.search(line)
        if not found:
            break
        keys[found.group(1)] = {int(r): v for r, v in _PER_RANK.findall(found.group(2))}
    return keys


def odd_nodes(
    refusal: dict[str, dict[int, str]], members: list[str]
) -> dict[str, dict[str, tuple[str, str]]]:
    """{host: {key: (its value, the group's)}} for the nodes whose ranks differ from the most
    common value (ties go to the lowest rank: node rank 0's). Ranks fill nodes in order."""
    ranks = {r for values in refusal.values() for r in values}
    per_node = max(1, (max(ranks, default=0) + 1) // max(1, len(members)))
    odd: dict[str, dict[str, tuple[str, str]]] = {}
    for key, values in refusal.items():
        usual = majority([v for _, v in sorted(values.items())])
        for rank, value in values.items():
            node = min(rank // per_node, len(members) - 1)
            if value != usual:
                odd.setdefault(members[node], {})[key] = (value, usual)
    return odd
