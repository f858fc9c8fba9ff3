"""The accelerator is there: the right arch on this machine, and device nodes this user opens.

Reads sysfs, /proc and /dev only (under SGLX_PROBE_ROOT when set), so it runs in milliseconds
and never touches the device itself.
"""

from __future__ import annotations

import errno
import grp
import os
import stat
from pathlib import Path

from sglx_core.errors import SglxError
from sglx_core.profile import Profile
from sglx_core.profile.schema import DeviceNode
from sglx_core.serving.hardware import detect
from sglx_core.serving.probe_root import probe_root
from sglx_platform.activate import device_flags
from sglx_platform.failures import FailureClass
from sglx_platform.probe import probe
from sglx_runtime.preflight.checks import Check, failed


def check_arch(profile: Profile, checks: list[Check]) -> bool:
    """True when this host has a device of the profile's arch."""
    machine = os.uname().machine
    if machine != profile.machine:
        checks.append(
            failed(
                "arch",
                f"this machine is {machine}, the image is for {profile.machine}",
                FailureClass.DEVICE_INIT_FAILED,
                f"use the {machine} image",
            )
        )
        return False
    found = probe(profile)
    if found.present:
        listed = ", ".join(f"{d.name}: {d.target}" for d in found.devices)
        checks.append(Check("arch", "pass", listed))
        return True
    if found.other:
        targets = ", ".join(sorted({d.target for d in found.other}))
        fix = f"use the sglx image for {targets} on this host"
    else:
        fix = (
            f"pass the devices to the container ({device_flags(profile.devices.nodes)}) and "
            "check the host driver with the sglx host checks"
        )
    detail = f"no {profile.arch} device: {found.reason}"
    checks.append(failed("arch", detail, FailureClass.DEVICE_INIT_FAILED, fix))
    return False


def check_interconnect(profile: Profile, checks: list[Check]) -> None:
    """The devices a server spans share the profile's fast link (`devices.interconnect`), not
    the slow one alone (seed S0-25: tensor parallelism over PCIe loses about 40 %; use fewer
    devices per group, or pipeline stages across the slow link). A warning: the server starts
    either way. Only where the probe reads the link and the profile words it."""
    wording = profile.devices.interconnect
    if wording is None:
        return  # a family whose link sglx cannot read
    try:
        found = detect(profile)
    except SglxError:
        return  # check_arch named the problem
    link = found.facts.get("interconnect")
    if link is None:
        return  # one device
    groups = found.facts.get("link_groups", "")
    if link == "fast":
        detail = f"{wording.fast} between all {found.count} devices ({groups})"
        checks.append(Check("interconnect", "pass", detail))
        return
    checks.append(
        Check(
            "interconnect",
            "warn",
            f"the {found.count} devices do not all share {wording.fast} ({groups}): a "
            f"tensor-parallel group across them talks over {wording.slow}, {wording.cost}",
            fix=f"{wording.fix}; `sglx hosts check` measures the bus bandwidth (collective "
            "smoke test)",
        )
    )


def check_devices(profile: Profile, checks: list[Check]) -> None:
    root = probe_root()
    for node in profile.devices.nodes:
        checks.extend(_node_checks(profile, root, node))
    _check_groups(profile, checks)


def _node_checks(profile: Profile, root: Path, node: DeviceNode) -> list[Check]:
    name = f"device {node.path}"
    paths = sorted(root.glob(node.path.lstrip("/")))
    if not paths:
        if not node.required:
            return [Check(name, "skip", f"not visible ({node.purpose})")]
        return [
            failed(
                name,
                f"not visible ({node.purpose})",
                FailureClass.DEVICE_INIT_FAILED,
                f"pass --device {node.path.replace('[0-9]*', 'N')} to the container",
            )
        ]
    checks: list[Check] = []
    for path in paths:
        targets = sorted(path.glob("renderD*")) if node.kind == "dir" else [path]
        if node.kind == "dir" and not targets:
            checks.append(
                failed(
                    name,
                    f"{path} holds no render nodes",
                    FailureClass.DEVICE_INIT_FAILED,
                    f"pass --device {node.path} (the whole directory)",
                )
            )
        checks.extend(open_check(profile, root, target) for target in targets)
    return checks


def _check_groups(profile: Profile, checks: list[Check]) -> None:
    groups = profile.devices.groups
    if not groups or os.geteuid() == 0:
        return
    mine = {grp.getgrgid(g).gr_name for g in os.getgroups() if _gid_known(g)}
    missing = [g for g in groups if g not in mine]
    if missing:
        checks.append(
            Check(
                "groups",
                "warn",
                f"this user is not in {', '.join(missing)}",
                fix="run the container with --group-add for each (numeric GIDs "
                "of the host when the image does not know them)",
            )
        )


def _gid_known(gid: int) -> bool:
    try:
        grp.getgrgid(gid)
    except KeyError:
        return False
    return True


def open_check(profile: Profile, root: Path, target: Path) -> Check:
    """The node is a character device this user opens read-write (what the runtime does)."""
    name = f"device /{target.relative_to(root)}"
    if not stat.S_ISCHR(target.stat().st_mode):
        return failed(
            name,
            "is not a character device",
            FailureClass.DEVICE_INIT_FAILED,
            "pass the real device node with --device, not a bind mount of a file",
        )
    try:
        os.close(os.open(target, os.O_RDWR))
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM):
            groups = ", ".join(profile.devices.groups) or "the device's group"
            return failed(
                name,
                f"permission denied for uid {os.geteuid()}",
                FailureClass.DEVICE_INIT_FAILED,
                f"add the container user to {groups} (--group-add), or fix the mode "
                "with the udev rules the sglx host role installs",
            )
        return failed(
            name,
            f"open failed: {os.strerror(exc.errno or 0)} (no driver behind the node?)",
            FailureClass.DEVICE_INIT_FAILED,
            "load the kernel driver on the host (sglx host checks show which)",
        )
    return Check(name, "pass", "opens read-write")
