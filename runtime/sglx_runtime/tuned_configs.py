"""The host's tuned set, mounted at the profile's tuning.target, into the server's environment.

The rollout places a tuned set (sglx_core/tuned.py) on the host and mounts it read-only.
Before the server starts, sglx-serve re-reads every file against the set's manifest and the
arch, and sets the variables that make AITER, TunableOp and hipBLASLt read them: a damaged set,
or one of another arch, stops the start (exit 2) rather than hand a library kernels this card
does not have. A set whose AITER rows are all for other cards of the arch (another
compute-unit count) is named in the log: AITER looks rows up by the running card's cu_num, so
none of them would be used.

No set mounted (the common case) changes nothing.
"""

from __future__ import annotations

from pathlib import Path

from sglx_core import tuned
from sglx_core.profile import Profile
from sglx_core.serving.hardware import Accelerators


def mounted_env(profile: Profile, found: Accelerators | None) -> tuple[dict[str, str], list[str]]:
    """The variables of the mounted set and the lines that say what was applied; ({}, []) when
    the arch takes no set or none is mounted. Raises SglxError for a set that must not serve."""
    target = Path(profile.tuning.target)
    if not profile.tuning.files or not (target / tuned.MANIFEST).exists():
        return {}, []
    tuned_set = tuned.load(target, profile)
    origin = tuned_set.manifest.provenance
    names = ", ".join(r.name for r in tuned_set.manifest.files)
    lines = [
        f"tuned GEMM configurations: set {tuned_set.digest} ({names}), captured from "
        f"{origin.captured_from} on {origin.host} at {origin.captured_at}"
    ]
    units = (found.facts.get("compute_units", "") if found else "").replace(" ", "")
    if units:
        counts = [int(n) for n in units.split(",")]
        lines += [
            f"tuned set: not used here: {line}" for line in tuned.unused_on(tuned_set, counts)
        ]
    return tuned.server_env(tuned_set, str(target), profile), lines
