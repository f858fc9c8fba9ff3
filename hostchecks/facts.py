"""What the host checks expect of one host, from the same sources as the playbooks.

Three layers, later ones winning: the roles' defaults (ansible/roles/*/defaults/main.yml), the
host's inventory variables (site settings such as the container name or the published port),
and the arch profile rendered by `sglx ansible vars` (device nodes, groups, kernel arguments,
sysctls, environment): with --bundle, the bundle's own profile (meta/arch.yaml). The profile
comes last: the checks compare a host with what the profile says now, even when the
inventory's rendered group_vars are stale.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from sglx.ansible_vars import render_vars
from sglx_core.profile import Profile, load_profile, load_profile_file

# The roles beside this suite: ../ansible/roles in a checkout (hostchecks/), ../roles in a
# bundle (ansible/host-checks/).
_HERE = Path(__file__).resolve().parent
ROLES = next(
    (p for p in (_HERE.parent / "ansible" / "roles", _HERE.parent / "roles") if p.is_dir()),
    _HERE.parent / "ansible" / "roles",
)
# A default that only names another variable: "{{ sglang_service_port }}".
_REFERENCE = re.compile(r"^\{\{\s*([a-z_][a-z0-9_]*)\s*\}\}$")


@cache
def role_defaults() -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for defaults in sorted(ROLES.glob("*/defaults/main.yml")):
        merged.update(yaml.safe_load(defaults.read_text(encoding="utf-8")) or {})
    return merged


@cache
def host_versions() -> ModuleType:
    """The accel_host role's parser of driver and firmware versions (its filter plugin
    sglx_host_versions.py), so that a check reads a host exactly as the role's preflight does.
    Loaded by path from ROLES, in a checkout and in a bundle alike."""
    path = ROLES / "accel_host" / "filter_plugins" / "sglx_host_versions.py"
    spec = importlib.util.spec_from_file_location("sglx_host_versions", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The bundle the checks are about (--sglx-bundle): its own profile (meta/arch.yaml, the one
# baked into its image) is what the hosts must match, never the checkout's.
_BUNDLE: list[Path] = []
BUNDLE_PROFILE = "meta/arch.yaml"


def use_bundle(folder: Path | None) -> None:
    _BUNDLE[:] = [] if folder is None else [folder]
    profile_of.cache_clear()


@cache
def profile_of(arch: str) -> Profile:
    if not _BUNDLE:
        return load_profile(arch)
    path = _BUNDLE[0] / BUNDLE_PROFILE
    if not path.is_file():
        raise ValueError(
            f"{_BUNDLE[0]} has no {BUNDLE_PROFILE} (a bundle made by an older sglx): re-create "
            "it with `sglx bundle create`, or run the checks without --bundle"
        )
    profile = load_profile_file(path)
    if profile.arch != arch:
        raise ValueError(
            f"the bundle {_BUNDLE[0]} is of arch {profile.arch}, the host's is {arch}: check "
            "the host with the bundle of its arch"
        )
    return profile


@dataclass(frozen=True)
class HostFacts:
    """One host's expected state; `vars` holds the role variables by their Ansible names."""

    name: str
    arch: str
    vars: dict[str, Any]
    profile: Profile

    def __getitem__(self, key: str) -> Any:
        return self.vars[key]

    def flag(self, key: str, default: bool = False) -> bool:
        """A boolean variable as Ansible's `bool` filter reads it (`default` when unset: the
        role's default)."""
        return _ansible_bool(self.vars.get(key, default))

    @property
    def container(self) -> str:
        return str(self.vars["sglang_service_container"])

    @property
    def service(self) -> str:
        return str(self.vars["sglang_service_name"])

    @property
    def state_dir(self) -> str:
        return str(self.vars["accel_host_state_dir"])

    @property
    def server_url(self) -> str:
        """Published there on the bridge network; the server listens there on the host's."""
        port = self.vars["sglang_service_host_port"]
        return f"http://{self.vars['sglang_service_health_host']}:{port}"

    @property
    def serving_group(self) -> list[str]:
        """The hosts this one serves with, in node-rank order (just itself when alone)."""
        group = str(self.vars.get("sglang_service_group") or "")
        if not group:
            return [self.name]
        return list(self.vars.get("groups", {}).get(group, [self.name]))

    @property
    def node_rank(self) -> int:
        members = self.serving_group
        return members.index(self.name) if self.name in members else 0

    @property
    def late_modules(self) -> list[str]:
        """The modules a unit loads after boot: the profile's after-boot modules, once the site
        set accel_host_load_after_boot (the role's vars/main.yml __accel_host_late_modules)."""
        if not self.flag("accel_host_load_after_boot"):
            return []
        return list(self.vars.get("accel_host_after_boot_modules") or [])

    @property
    def kernel_cmdline(self) -> list[str]:
        """What the running kernel must carry: the profile's arguments, then the blacklist of
        the late modules (the role's __accel_host_kernel_cmdline)."""
        wanted = list(self.vars["accel_host_kernel_cmdline"])
        if self.late_modules:
            wanted.append("modprobe.blacklist=" + ",".join(self.late_modules))
        return wanted


def _ansible_bool(value: Any) -> bool:
    """Ansible's `bool` filter (to_bool): true, "yes", "on", "true", "1" or 1; else false."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        value = value.lower()
    return value in ("yes", "on", "1", "true", 1)


def host_facts(name: str, inventory_vars: dict[str, Any], arch: str | None) -> HostFacts:
    """`arch` (--arch) wins over the inventory's sglx_arch; one of them must say it."""
    arch = arch or inventory_vars.get("sglx_arch")
    if not arch:
        raise ValueError(
            f"{name}: no arch: its inventory has no sglx_arch (group_vars/<arch>/sglx_profile.yml"
            " from `sglx ansible vars`); pass --arch ARCH"
        )
    profile = profile_of(str(arch))
    merged = {**role_defaults(), **inventory_vars, **render_vars(profile)}
    for key, value in merged.items():
        if isinstance(value, str) and (ref := _REFERENCE.match(value)):
            merged[key] = merged.get(ref.group(1), value)
    return HostFacts(name, str(arch), merged, profile)
