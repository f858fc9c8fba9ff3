"""Check that every rank of one server runs with the same configuration before serving.

Ranks started with different server arguments, models, profiles, package versions or
environments take different code paths and then wait on collectives the others never issue: a
multi-card or multi-node deadlock with no error. After the process groups exist, each rank
shares a fingerprint and every rank compares; a difference stops every rank at once, naming the
keys and which rank (on which host) holds which value. What differs per node or per launch by
design (the profile's `ranks.per_node_*`) is left out, so a group of hosts can start.

The fingerprint is also written to a file (`fingerprint_path`), where the host checks read what
the running server compared.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import tempfile
import threading
from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from sglx_core.errors import SglxError
from sglx_core.profile import Profile
from sglx_core.weights_manifest import manifest_digest
from sglx_platform.failures import FailureClass, PlatformError

logger = logging.getLogger(__name__)

PACKAGES = ("sglang", "torch", "sglx", "sglx-platform", "sglx-kernels")
# Server arguments whose values are secrets: compared by digest, never shown or written.
SECRET_WORDS = ("password", "api_key", "token", "secret")


def _shown(name: str, value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    if value is not None and any(word in name for word in SECRET_WORDS):
        return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]
    return text


def weights_digest(model_path: str) -> str:
    """The converted model's weights digest (its sglx manifest's, as image labels and bundles
    name it); a folder without a readable manifest (a site's own model) is named by a digest
    of its config.json."""
    folder = Path(model_path)
    try:
        return manifest_digest(folder)
    except SglxError:
        pass
    try:
        return "config:" + hashlib.sha256((folder / "config.json").read_bytes()).hexdigest()[:16]
    except OSError:
        return "unknown"


def fingerprint(
    profile: Profile,
    server_args: Any = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """What must be equal on every rank of one server, as key -> shown value."""
    environ = os.environ if environ is None else environ
    ranks = profile.ranks
    found = {"profile": hashlib.sha256(profile.model_dump_json().encode()).hexdigest()[:16]}
    for package in PACKAGES:
        try:
            found[f"version:{package}"] = version(package)
        except PackageNotFoundError:
            found[f"version:{package}"] = "absent"
    if server_args is not None:
        for name, value in sorted(_fields(server_args).items()):
            if name not in ranks.per_node_args:
                found[f"arg:{name}"] = _shown(name, value)
        model = getattr(server_args, "model_path", None)
        if model:
            found["weights"] = weights_digest(str(model))
    for name in sorted(environ):
        if name.startswith(ranks.env_prefixes) and name not in ranks.per_node_env:
            found[f"env:{name}"] = environ[name]
    return found


def _fields(server_args: Any) -> dict[str, Any]:
    """Every field of sglang's ServerArgs record (a msgspec struct or a dataclass)."""
    names = getattr(type(server_args), "__struct_fields__", None)
    if names is None:
        names = [n for n in vars(server_args) if not n.startswith("_")]
    return {name: getattr(server_args, name) for name in names}


def differences(prints: list[dict[str, str]], where: list[str]) -> list[str]:
    """One line per key that differs, with each rank's value and where that rank runs."""
    keys = sorted({k for p in prints for k in p})
    lines = []
    for key in keys:
        values = [p.get(key, "<unset>") for p in prints]
        if len(set(values)) > 1:
            per_rank = "; ".join(f"{w}: {v}" for w, v in zip(where, values, strict=True))
            lines.append(f"{key} differs ({per_rank})")
    return lines


def fingerprint_path(rank: int) -> Path:
    return Path(tempfile.gettempdir()) / f"sglx-fingerprint-rank{rank}.json"


def write_fingerprint(rank: int, where: str, prints: dict[str, str]) -> None:
    """Temp file, then rename: a reader never sees half of it."""
    path = fingerprint_path(rank)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"rank": rank, "where": where, "fingerprint": prints}, indent=1))
    tmp.replace(path)


def check_ranks(profile: Profile, server_args: Any = None, group: Any = None) -> None:
    """All-gather the fingerprints over `group` (default: the world) and refuse on mismatch.
    A rank that gets no answer within the profile's `ranks.timeout_s` fails instead of
    waiting (a rank that never joins would otherwise hang the group)."""
    import torch.distributed as dist

    rank = dist.get_rank() if dist.is_initialized() else 0
    where = f"rank {rank} on {socket.gethostname()}"
    mine = fingerprint(profile, server_args)
    write_fingerprint(rank, where, mine)
    if not dist.is_initialized() or dist.get_world_size(group) == 1:
        return
    gathered: list[Any] = [None] * dist.get_world_size(group)
    done = threading.Event()
    watchdog = threading.Thread(
        target=_expire, args=(done, profile.ranks.timeout_s, where), daemon=True
    )
    watchdog.start()
    try:
        dist.all_gather_object(gathered, {"where": where, "fingerprint": mine}, group=group)
    finally:
        done.set()
    diff = differences([g["fingerprint"] for g in gathered], [g["where"] for g in gathered])
    if diff:
        fix = (
            "start every rank from the same image, model, server arguments and environment "
            "(per-node values are listed in the profile's ranks.per_node_args/per_node_env)"
        )
        if any(line.startswith("arg:random_seed ") for line in diff):
            # sglang draws a seed per launch when none is given; nodes sampling with different
            # seeds feed different tokens to the same tensor-parallel step.
            fix += "; sglang draws --random-seed per launch: give every node the same one"
        raise PlatformError(
            FailureClass.CONFIG_REFUSED,
            "ranks disagree on their configuration, which deadlocks multi-card and multi-node "
            "runs:\n    " + "\n    ".join(diff),
            fix,
        )
    # The host checks read the last of this line and of a refusal from the server's log.
    logger.info("sglx: %d ranks agree on their configuration (%s)", len(gathered), where)


def _expire(done: threading.Event, timeout_s: int, where: str) -> None:
    if done.wait(timeout_s):
        return
    # The main thread is blocked inside the collective; a clean raise cannot reach it.
    message = (
        f"[sglx config_refused] {where}: the other ranks did not answer the configuration "
        f"check within {timeout_s} s (a rank with other parallel settings never joins). "
        "Fix: start every rank with the same --tp/--pp/--nnodes and --dist-init-addr."
    )
    os.write(2, (message + "\n").encode())
    os._exit(3)
