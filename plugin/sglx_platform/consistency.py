"""Check that every rank runs with the same configuration before serving.

Ranks started with different profiles, sglx or sglang versions, or environments take different
code paths and then wait on collectives the others never issue: a multi-card deadlock with no
error. After the process groups exist, each rank shares a fingerprint and every rank compares.
"""

from __future__ import annotations

import hashlib
import os
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from sglx.profile import Profile
from sglx_platform.failures import FailureClass, PlatformError

PACKAGES = ("sglang", "torch", "sglx", "sglx-platform", "sglx-kernels")
# Variables that change code paths across ranks even when the profile does not set them.
ENV_PREFIXES = ("SGLANG_", "SGLX_", "NCCL_", "HSA_", "HIP_", "XPU_", "XMLIR_", "BKCL_")
# Per-rank by nature: never compared.
PER_RANK = {"SGLX_PROFILE_FALLBACKS_DIR"}


def fingerprint(profile: Profile) -> dict[str, str]:
    """What must be equal on every rank of one server."""
    print_ = {"profile": hashlib.sha256(profile.model_dump_json().encode()).hexdigest()[:16]}
    for package in PACKAGES:
        try:
            print_[f"version:{package}"] = version(package)
        except PackageNotFoundError:
            print_[f"version:{package}"] = "absent"
    for name in sorted(os.environ):
        if name.startswith(ENV_PREFIXES) and name not in PER_RANK:
            print_[f"env:{name}"] = os.environ[name]
    return print_


def differences(prints: list[dict[str, str]]) -> list[str]:
    """Human lines naming each key that differs, with each rank's value."""
    keys = sorted({k for p in prints for k in p})
    lines = []
    for key in keys:
        values = [p.get(key, "<unset>") for p in prints]
        if len(set(values)) > 1:
            per_rank = ", ".join(f"rank {r}: {v}" for r, v in enumerate(values))
            lines.append(f"{key} differs ({per_rank})")
    return lines


def check_ranks(profile: Profile, group: Any = None) -> None:
    """All-gather the fingerprints over `group` (default: the world) and refuse on mismatch."""
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size(group) == 1:
        return
    prints: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(prints, fingerprint(profile), group=group)
    diff = differences(prints)
    if diff:
        raise PlatformError(
            FailureClass.CONFIG_REFUSED,
            "ranks disagree on their configuration, which deadlocks multi-card runs:\n    "
            + "\n    ".join(diff),
            "start every rank from the same image with the same environment",
        )
