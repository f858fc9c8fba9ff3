"""The serving profile `sglx-serve` starts the server with, chosen from this host's devices
and the model, and explained.

At start the devices of the arch are read from sysfs and the model's shape from its
config.json (sglx_core.serving: no torch, no sglang, so `--list-profiles` and `--dry-run`
answer in a fraction of a second). The best runnable serving profile of the baked arch profile
is chosen, its arguments go before the user's (argparse keeps the last flag, so the user's win,
each override logged), its variables join the server's environment unless `docker run -e` set
them, and the capacity check runs on the final flags: a model that cannot fit is refused in
seconds, with the numbers and the fixes, instead of dying out of memory after minutes of
loading.

Variables steer it: `SGLX_SERVING_PROFILE=NAME` picks a profile by name (refused with its
reason when it does not match this host or the model does not fit), `SGLX_SERVING_PROFILE=off`
starts the server with the user's flags alone, and `SGLX_SERVING_METRIC` (latency or
throughput) and `SGLX_SERVING_PRECISION` (bf16, fp8, ...) leave out the profiles tuned for
another (AMD AIM's AIM_METRIC and AIM_PRECISION, as sglx variables). The chosen name is
handed to the server as `SGLX_SERVING_PROFILE`, which the ranks of a serving group compare (an
SGLX_ variable): hosts that chose differently refuse to form the group, naming the host.

What selection cannot judge is left to the checks that can: with no device of the arch visible
(a container started without its devices), nothing is chosen and preflight names what is
missing; a model given as a hub id has no config.json here, so only the hardware is matched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sglx_core.errors import SglxError
from sglx_core.profile import Profile
from sglx_core.serving.flags import read_args
from sglx_core.serving.hardware import Accelerators, detect
from sglx_core.serving.model import ModelShape, read_model
from sglx_core.serving.resolve import Resolution, parse_flags, resolve
from sglx_core.serving.select import Candidate, candidates

PROFILE_ENV = "SGLX_SERVING_PROFILE"
METRIC_ENV = "SGLX_SERVING_METRIC"
PRECISION_ENV = "SGLX_SERVING_PRECISION"
METRICS = ("latency", "throughput")
OFF = "off"
# What sglx-serve takes for itself; everything else goes to launch_server.
LIST_FLAG = "--list-profiles"
DRY_RUN_FLAG = "--dry-run"
JSON_FLAG = "--json"
VERSION_FLAG = "--version"
OWN_FLAGS = (LIST_FLAG, DRY_RUN_FLAG, JSON_FLAG, VERSION_FLAG)


@dataclass(frozen=True)
class Plan:
    """What this host would start: the hardware and model read, every profile sorted, and the
    resolution of the chosen one (None when selection does not apply: `skipped` says why)."""

    hardware: Accelerators | None
    shape: ModelShape | None
    listed: list[Candidate]
    resolution: Resolution | None
    skipped: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        """Variables the server gets on top of this process's environment."""
        if self.resolution is None:
            return {}
        return {**self.resolution.env, PROFILE_ENV: self.resolution.chosen.name}


def model_folder(user_args: Sequence[str], default: str) -> str:
    """The model the server will load: the user's last --model-path, else `default`."""
    return parse_flags(list(user_args)).get("--model-path") or default


def plan(
    profile: Profile,
    user_args: Sequence[str],
    environ: Mapping[str, str],
    model_path: str,
    root: Path | None = None,
) -> Plan:
    """Detect, read, sort and resolve. Raises SglxError (exit 2 at start) when the topology or
    the model's config.json is malformed, when the profile named by SGLX_SERVING_PROFILE cannot
    run here, when no profile can, and when the final flags do not fit."""
    forced = environ.get(PROFILE_ENV, "")
    if forced == OFF:
        return Plan(None, None, [], None, skipped=f"{PROFILE_ENV}={OFF}: the user's flags alone")
    if not profile.serving.profiles:
        skipped = f"the {profile.arch} profile has no serving profiles"
        return Plan(None, None, [], None, skipped=skipped)
    try:
        hardware = detect(profile, root)
    except SglxError as error:
        if error.code != "no_device":
            raise
        skipped = f"no {profile.arch} device visible ({error}); preflight names what is missing"
        return Plan(None, None, [], None, skipped=skipped)
    notes: list[str] = []
    shape = _shape(model_path, notes)
    metric = environ.get(METRIC_ENV) or None
    if metric is not None and metric not in METRICS:
        raise SglxError(
            f"{METRIC_ENV}={metric} is not one of {', '.join(METRICS)}",
            hint=f"set {METRIC_ENV} to latency or throughput, or unset it",
            code="usage",
        )
    precision = environ.get(PRECISION_ENV) or None
    listed = candidates(
        profile, hardware, shape, precision=precision, metric=metric, named=forced or None
    )
    chosen = _choose(profile, listed, forced, hardware)
    resolution = resolve(profile, chosen, user_args, environ, shape, hardware)
    capacity = resolution.capacity
    if capacity is not None and not capacity.fits:
        fixes = "".join(f"\n  - {fix}" for fix in capacity.fixes)
        raise SglxError(
            f"the model does not fit with serving profile {chosen.name} and these flags: "
            f"{capacity.summary()}",
            hint=f"change one of these, then start again:{fixes}"
            if fixes
            else "use a host with more memory per device",
            code="does_not_fit",
        )
    return Plan(hardware, shape, listed, resolution, notes=notes)


def _shape(model_path: str, notes: list[str]) -> ModelShape | None:
    folder = Path(model_path)
    try:
        local = folder.is_dir()
    except (OSError, ValueError):
        local = False
    if not local:
        notes.append(f"{model_path} is not a local folder: matched on the hardware alone")
        return None
    return read_model(folder)


def _choose(
    profile: Profile, listed: list[Candidate], forced: str, hardware: Accelerators
) -> Candidate:
    if forced:
        named = [c for c in listed if c.name == forced]
        if not named:
            known = ", ".join(c.name for c in listed)
            raise SglxError(
                f"{PROFILE_ENV}={forced} names no serving profile of {profile.arch}",
                hint=f"use one of: {known} (or {PROFILE_ENV}={OFF})",
                code="usage",
            )
        if named[0].status != "runnable":
            raise SglxError(
                f"serving profile {forced} ({PROFILE_ENV}) cannot run here: {named[0].reason}",
                hint="unset it to let sglx choose, or run on the hardware it names",
                code="no_serving_profile",
            )
        return named[0]
    runnable = [c for c in listed if c.status == "runnable"]
    if runnable:
        return runnable[0]
    what = f"{hardware.count}x {hardware.model or profile.arch}"
    lines = "\n  ".join(f"{c.name}: {c.status}: {c.reason}" for c in listed)
    low = any(c.status == "low_memory" for c in listed)
    raise SglxError(
        f"no serving profile of {profile.arch} can run this model on {what}:\n  {lines}",
        hint="a larger TP, a shorter --context-length, an FP8 KV cache where the arch allows "
        "it, or a quantized checkpoint; `sglx-serve --list-profiles` shows the numbers"
        if low
        else "run on hardware a profile names, or add a serving profile for this host to the "
        "arch profile (docs/reference/serving.md)",
        code="no_serving_profile",
    )


def split_own_flags(argv: Sequence[str]) -> tuple[set[str], list[str]]:
    """sglx-serve's own flags (only when --list-profiles, --dry-run or --version is among
    them: --json alone is left to the server) and the rest. The words are read as sglang's
    parser reads them (sglx_core.serving.flags), so a word that is another flag's value is
    never taken for one of these; raises SglxError where that parser would refuse them."""
    read = read_args(argv, own=OWN_FLAGS)
    if not read.own & {LIST_FLAG, DRY_RUN_FLAG, VERSION_FLAG}:
        return set(), list(argv)
    return read.own, read.argv


def log_lines(result: Plan) -> list[str]:
    """What sglx-serve says before the server starts: the choice, its reason, each user flag
    that overrides the profile, the capacity."""
    if result.resolution is None:
        return [f"no serving profile applied: {result.skipped}"]
    chosen = result.resolution.chosen
    lines = [f"serving profile {chosen.name} ({chosen.profile.rank}): {chosen.reason}"]
    lines += result.notes
    for item in result.resolution.settings:
        if item.overrides is not None:
            lines.append(
                f"{item.name} {item.value} ({item.layer}) overrides the serving profile's "
                f"{item.overrides}"
            )
    if result.resolution.capacity is not None:
        lines.append(result.resolution.capacity.summary())
    return lines


def list_document(result: Plan) -> dict[str, Any]:
    """`--list-profiles --json` (docs/reference/serving.md has its schema)."""
    selected = result.resolution.chosen.name if result.resolution else None
    return {
        "hardware": asdict(result.hardware) if result.hardware else None,
        "model": _model_document(result.shape),
        "profiles": [
            {
                "name": c.name,
                "status": c.status,
                "reason": c.reason,
                "memory_needed_bytes": c.memory_needed_bytes,
                "rank": c.profile.rank,
                "match": c.profile.match.model_dump(mode="json"),
            }
            for c in result.listed
        ],
        "selected": selected,
        "skipped": result.skipped or None,
    }


def dry_run_document(result: Plan, command: list[str]) -> dict[str, Any]:
    """`--dry-run --json` (docs/reference/serving.md has its schema)."""
    resolution = result.resolution
    capacity = resolution.capacity if resolution else None
    return {
        "selected": resolution.chosen.name if resolution else None,
        "skipped": result.skipped or None,
        "command": command,
        "env": result.env,
        "settings": [asdict(s) for s in resolution.settings] if resolution else [],
        "capacity": _capacity_document(capacity) if capacity is not None else None,
    }


def _capacity_document(capacity: Any) -> dict[str, Any]:
    document = asdict(capacity)
    document.pop("reserve_bytes", None)
    document["fixes"] = list(capacity.fixes)
    return document


def _model_document(shape: ModelShape | None) -> dict[str, Any] | None:
    if shape is None:
        return None
    keys = ("architecture", "parameters", "weight_bytes", "weight_bytes_source", "dtype",
            "quantization", "layers", "hidden_size", "kv_heads", "head_dim",
            "max_position_embeddings")  # fmt: skip
    return {key: getattr(shape, key) for key in keys}


def list_table(result: Plan) -> str:
    """`--list-profiles` as a table: every profile, its group and why."""
    head = _hardware_line(result)
    if not result.listed:
        return f"{head}\nno serving profile applies: {result.skipped}"
    width = max(len(c.name) for c in result.listed)
    rows = [f"{'profile'.ljust(width)}  {'status':<12}  reason"]
    for c in result.listed:
        rows.append(f"{c.name.ljust(width)}  {c.status:<12}  {c.reason}")
    chosen = result.resolution.chosen.name if result.resolution else "none"
    return "\n".join([head, *result.notes, *rows, f"selected: {chosen}"])


def dry_run_text(result: Plan, command: list[str]) -> str:
    """`--dry-run` as text: the command, the added environment, each value and its layer."""
    import shlex

    lines = [_hardware_line(result), *log_lines(result), "", "command:", "  " + shlex.join(command)]
    if result.env:
        lines += ["", "environment added:"]
        lines += [f"  {k}={shlex.quote(v)}" for k, v in sorted(result.env.items())]
    if result.resolution is not None:
        lines += ["", "settings (value <- layer):"]
        for s in result.resolution.settings:
            over = f" (overrides {s.overrides})" if s.overrides is not None else ""
            lines.append(f"  {s.name} {s.value} <- {s.layer}{over}")
    return "\n".join(lines)


def _hardware_line(result: Plan) -> str:
    hw = result.hardware
    if hw is None:
        return "hardware: not read"
    facts = ", ".join(f"{k} {v}" for k, v in hw.facts.items())
    return f"hardware: {hw.count}x {hw.model or hw.family} ({facts})"
