"""`sglx-preflight`: a dry run of everything SGLang needs, in seconds, without loading a model.

The image entrypoint runs it first. Each check passes, warns or fails; a failure carries one of
the five failure classes (plugin not found, device init failed, symbol not found, init hang,
config refused) and the fix. Library loading, imports and the first device operation run in a
child process with a timeout, so a hang is reported as one instead of hanging the entrypoint.

Exit codes: 0 every check passed, 1 a check failed, 2 preflight itself could not run.
"""

from __future__ import annotations

import argparse
import errno
import grp
import json
import os
import stat
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatch
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Literal

from sglx.errors import SglxError
from sglx.profile import Profile
from sglx.report import EXIT_ERROR, Finding, Result, Table, error_result, render
from sglx.scan.ldconf import conf_dirs
from sglx.scan.rootfs import RootFS
from sglx_platform.activate import device_flags
from sglx_platform.baked import PROFILE_ENV, baked_profile, profile_path
from sglx_platform.failures import FailureClass
from sglx_platform.probe import PROBE_ROOT_ENV, probe, probe_root

Status = Literal["pass", "warn", "fail", "skip"]
MODULES = ("torch", "sglang.srt.server_args", "sglx_platform.platforms.base")
DEFAULT_LIB_DIRS = (
    "/lib",
    "/usr/lib",
    "/lib64",
    "/usr/lib64",
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
)


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    failure: FailureClass | None = None
    fix: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "check": self.name,
            "status": self.status,
            "detail": self.detail,
            "class": self.failure.value if self.failure else None,
            "fix": self.fix,
        }


def run(server_argv: Sequence[str], *, device_init: bool, timeout_s: float) -> Result:
    checks: list[Check] = []
    profile = _check_profile(checks)
    if profile is not None:
        _check_plugin(profile, checks)
        present = _check_arch(profile, checks)
        _check_devices(profile, checks)
        _check_env(profile, checks)
        child = _child_checks(profile, timeout_s, device_init and present)
        checks.extend(child)
        imported = [c for c in child if c.name.startswith("module ")]
        if len(imported) == len(MODULES) and all(c.status == "pass" for c in imported):
            _check_server_args(profile, server_argv, checks)
        else:
            checks.append(Check("server args", "skip", "sglang does not import (see above)"))
    findings = tuple(
        Finding(
            code=c.failure.value if c.failure else "failed",
            message=f"{c.name}: {c.detail}",
            hint=c.fix,
        )
        for c in checks
        if c.status == "fail"
    )
    arch = profile.arch if profile else "?"
    table = Table(
        ("check", "status", "class", "detail"),
        tuple(
            (c.name, c.status, c.failure.value if c.failure else "", _short(c.detail))
            for c in checks
        ),
        title=f"sglx preflight ({arch}, profile {profile_path()})",
    )
    verdict = (
        "preflight passed"
        if not findings
        else (f"preflight failed: {len(findings)} check(s); fixes below")
    )
    return Result(
        command=("preflight",),
        data={"arch": arch, "checks": [c.to_json() for c in checks]},
        tables=(table,),
        lines=(verdict,),
        findings=findings,
    )


def _short(text: str, width: int = 100) -> str:
    """One table line; the findings below the table carry the full text."""
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= width else line[: width - 1] + "…"


# --------------------------------------------------------------------------------------------
# Checks that read files only
# --------------------------------------------------------------------------------------------


def _check_profile(checks: list[Check]) -> Profile | None:
    path = profile_path()
    if not path.is_file():
        checks.append(
            Check(
                "profile",
                "fail",
                f"no sglx arch profile at {path}",
                FailureClass.PLUGIN_NOT_FOUND,
                f"run the sglx image, or set {PROFILE_ENV} to an arch.yaml",
            )
        )
        return None
    try:
        profile = baked_profile()
    except SglxError as exc:
        checks.append(Check("profile", "fail", exc.message, FailureClass.CONFIG_REFUSED, exc.hint))
        return None
    checks.append(
        Check("profile", "pass", f"{profile.arch} ({profile.support.level}): {profile.description}")
    )
    for note in profile.support.notes:
        checks.append(Check("support", "warn", note))
    return profile


def _check_plugin(profile: Profile, checks: list[Check]) -> None:
    name = profile.platform.entry_point
    platforms = {ep.name: ep.value for ep in entry_points(group="sglang.srt.platforms")}
    hooks = {ep.name: ep.value for ep in entry_points(group="sglang.srt.plugins")}
    if not platforms.get(name, "").startswith("sglx_platform"):
        checks.append(
            Check(
                "plugin",
                "fail",
                f"no '{name}' entry point of sglx-platform in sglang.srt.platforms "
                f"(found: {', '.join(platforms) or 'none'})",
                FailureClass.PLUGIN_NOT_FOUND,
                "install the sglx-platform wheel into the serving environment",
            )
        )
        return
    if not hooks.get(name, "").startswith("sglx_platform"):
        checks.append(
            Check(
                "plugin",
                "fail",
                f"no '{name}' entry point in sglang.srt.plugins",
                FailureClass.PLUGIN_NOT_FOUND,
                "reinstall the sglx-platform wheel (its metadata is incomplete)",
            )
        )
        return
    selected = os.environ.get("SGLANG_PLATFORM")
    if selected is None:
        checks.append(
            Check(
                "plugin",
                "warn",
                "SGLANG_PLATFORM is unset: a broken plugin would "
                f"let sglang fall back to another platform (set it to {name})",
            )
        )
    elif selected != name:
        checks.append(
            Check(
                "plugin",
                "fail",
                f"SGLANG_PLATFORM={selected} selects another platform plugin",
                FailureClass.PLUGIN_NOT_FOUND,
                f"set SGLANG_PLATFORM={name}",
            )
        )
    else:
        checks.append(Check("plugin", "pass", f"sglang.srt.platforms:{name} -> {platforms[name]}"))


def _check_arch(profile: Profile, checks: list[Check]) -> bool:
    if os.uname().machine != profile.machine:
        checks.append(
            Check(
                "arch",
                "fail",
                f"this machine is {os.uname().machine}, the image is for {profile.machine}",
                FailureClass.DEVICE_INIT_FAILED,
                f"use the {os.uname().machine} image",
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
    checks.append(
        Check(
            "arch",
            "fail",
            f"no {profile.arch} device: {found.reason}",
            FailureClass.DEVICE_INIT_FAILED,
            fix,
        )
    )
    return False


def _check_devices(profile: Profile, checks: list[Check]) -> None:
    root = probe_root()
    for node in profile.devices.nodes:
        paths = sorted(root.glob(node.path.lstrip("/")))
        shown = node.path
        if not paths:
            status: Status = "fail" if node.required else "skip"
            checks.append(
                Check(
                    f"device {shown}",
                    status,
                    f"not visible ({node.purpose})",
                    FailureClass.DEVICE_INIT_FAILED if node.required else None,
                    f"pass --device {shown.replace('[0-9]*', 'N')} to the container"
                    if node.required
                    else None,
                )
            )
            continue
        for path in paths:
            targets = sorted(path.glob("renderD*")) if node.kind == "dir" else [path]
            if node.kind == "dir" and not targets:
                checks.append(
                    Check(
                        f"device {shown}",
                        "fail",
                        f"{path} holds no render nodes",
                        FailureClass.DEVICE_INIT_FAILED,
                        f"pass --device {shown} (the whole directory)",
                    )
                )
            for target in targets:
                checks.append(_open_check(profile, root, target))
    groups = profile.devices.groups
    if groups:
        mine = {grp.getgrgid(g).gr_name for g in os.getgroups() if _gid_known(g)}
        missing = [g for g in groups if g not in mine]
        if missing and os.geteuid() != 0:
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


def _open_check(profile: Profile, root: Path, target: Path) -> Check:
    name = f"device /{target.relative_to(root)}"
    if not stat.S_ISCHR(target.stat().st_mode):
        return Check(
            name,
            "fail",
            "is not a character device",
            FailureClass.DEVICE_INIT_FAILED,
            "pass the real device node with --device, not a bind mount of a file",
        )
    try:
        os.close(os.open(target, os.O_RDWR))
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM):
            groups = ", ".join(profile.devices.groups) or "the device's group"
            return Check(
                name,
                "fail",
                f"permission denied for uid {os.geteuid()}",
                FailureClass.DEVICE_INIT_FAILED,
                f"add the container user to {groups} (--group-add), or fix the mode "
                "with the udev rules the sglx host role installs",
            )
        return Check(
            name,
            "fail",
            f"open failed: {os.strerror(exc.errno or 0)} (no driver behind the node?)",
            FailureClass.DEVICE_INIT_FAILED,
            "load the kernel driver on the host (sglx host checks show which)",
        )
    return Check(name, "pass", "opens read-write")


def _check_env(profile: Profile, checks: list[Check]) -> None:
    for name, reason in profile.env_forbidden.items():
        if name in os.environ:
            checks.append(
                Check(
                    f"env {name}",
                    "fail",
                    f"is set ({os.environ[name]}): {reason}",
                    FailureClass.CONFIG_REFUSED,
                    f"unset {name}",
                )
            )
    changed = [n for n, v in profile.env.items() if os.environ.get(n) != v]
    if changed:
        checks.append(
            Check(
                "env",
                "warn",
                f"{len(changed)} variable(s) differ from the profile: {', '.join(changed)}",
            )
        )
    else:
        checks.append(Check("env", "pass", f"{len(profile.env)} profile variables as baked"))


# --------------------------------------------------------------------------------------------
# Checks in a child process: libraries, imports, the first device operation
# --------------------------------------------------------------------------------------------

_CHILD = r"""
import ctypes, json, os, sys, time
spec = json.loads(sys.argv[1])
out = []
def emit(kind, name, ok, error=""):
    out.append({"kind": kind, "name": name, "ok": ok, "error": error})
    print(json.dumps(out[-1]), flush=True)
for path in spec["libraries"]:
    try:
        ctypes.CDLL(path, mode=os.RTLD_NOW)
        emit("library", path, True)
    except OSError as exc:
        emit("library", path, False, str(exc))
for module in spec["modules"]:
    try:
        __import__(module)
        emit("module", module, True)
    except BaseException as exc:
        emit("module", module, False, f"{type(exc).__name__}: {exc}")
if spec["device_type"]:
    try:
        import torch
        if spec["device_type"] == "cpu":
            torch.ones(1).add_(1)
        else:
            torch.ones(1, device=spec["device_type"]).add_(1)
            torch.cuda.synchronize()
        emit("device", spec["device_type"], True)
    except BaseException as exc:
        emit("device", spec["device_type"], False, f"{type(exc).__name__}: {exc}")
"""


def _child_checks(profile: Profile, timeout_s: float, device_init: bool) -> list[Check]:
    checks: list[Check] = []
    libraries = []
    for pattern, why in profile.scan.require.items():
        path = find_library(pattern)
        if path is None:
            checks.append(
                Check(
                    f"library {pattern}",
                    "fail",
                    f"not found ({why})",
                    FailureClass.SYMBOL_NOT_FOUND,
                    "the image lacks it: rebuild from a base that carries it "
                    "(sglx scan --image shows what is unresolved)",
                )
            )
        else:
            libraries.append(str(path))
    spec = {
        "libraries": libraries,
        "modules": list(MODULES),
        "device_type": profile.platform.device_type if device_init else "",
    }
    lines: list[str] = []
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, json.dumps(spec)],
            env=_unselected(),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        lines = proc.stdout.splitlines()
        crashed = proc.returncode != 0
    except subprocess.TimeoutExpired as exc:
        stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        lines = stdout.splitlines()
        crashed = False
        done = [json.loads(line)["name"] for line in lines]
        pending = [*libraries, *MODULES, spec["device_type"]]
        stuck = next((p for p in pending if p and p not in done), "the child")
        checks.append(
            Check(
                "init",
                "fail",
                f"{stuck} did not finish within {timeout_s:.0f} s",
                FailureClass.INIT_HANG,
                "check the device and driver (vendor smi tool, kernel log), and "
                "that no other process holds the device",
            )
        )
    for line in lines:
        item = json.loads(line)
        checks.append(_classify(item))
    if crashed and not lines:
        checks.append(
            Check(
                "init",
                "fail",
                "the check process crashed before reporting",
                FailureClass.SYMBOL_NOT_FOUND,
                "run it by hand to see the crash",
            )
        )
    return checks


def _unselected() -> dict[str, str]:
    """The environment without SGLANG_PLATFORM: importing sglang resolves the platform, and an
    explicit selection would turn a missing device (reported by the checks above) into an
    import failure here."""
    return {k: v for k, v in os.environ.items() if k != "SGLANG_PLATFORM"}


def _classify(item: dict[str, Any]) -> Check:
    kind, name, error = item["kind"], item["name"], item["error"]
    label = f"{kind} {Path(name).name if kind == 'library' else name}"
    if item["ok"]:
        return Check(label, "pass", "loads" if kind != "device" else "first operation ran")
    if "undefined symbol" in error or "version `" in error:
        return Check(
            label,
            "fail",
            error,
            FailureClass.SYMBOL_NOT_FOUND,
            "the libraries come from mismatched builds: take them from one release "
            "(the image's wheel lock pins them together)",
        )
    if kind == "device":
        return Check(
            label,
            "fail",
            error,
            FailureClass.DEVICE_INIT_FAILED,
            "check the device nodes, their permissions and the host driver",
        )
    if kind == "library" or "cannot open shared object" in error:
        return Check(
            label,
            "fail",
            error,
            FailureClass.SYMBOL_NOT_FOUND,
            "a library it needs is missing from the image (sglx scan --image)",
        )
    return Check(
        label,
        "fail",
        error,
        FailureClass.PLUGIN_NOT_FOUND,
        "the serving environment is incomplete: rebuild the image from its lock",
    )


def library_dirs() -> list[Path]:
    """Where the dynamic loader looks: LD_LIBRARY_PATH, ld.so.conf, default dirs, then the
    Python environment (wheels such as torch ship their libraries in site-packages)."""
    dirs = [Path(d) for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    dirs += [Path(d) for d in conf_dirs(RootFS(Path("/")))]
    dirs += [Path(d) for d in DEFAULT_LIB_DIRS]
    dirs += [Path(p) for p in sys.path if p.endswith("site-packages")]
    return [d for d in dict.fromkeys(dirs) if d.is_dir()]


def find_library(pattern: str) -> Path | None:
    """The first file matching the soname glob in the loader's dirs (site-packages: recursive)."""
    for folder in library_dirs():
        candidates = (
            folder.rglob("*.so*") if folder.name == "site-packages" else folder.glob("*.so*")
        )
        for candidate in candidates:
            if fnmatch(candidate.name, pattern):
                return candidate
    return None


# --------------------------------------------------------------------------------------------
# Server arguments against the profile
# --------------------------------------------------------------------------------------------


def _check_server_args(profile: Profile, argv: Sequence[str], checks: list[Check]) -> None:
    if not argv:
        checks.append(Check("server args", "skip", "none given (pass them after --)"))
        return
    os.environ.clear()
    os.environ.update(_unselected())  # see _unselected: the platform is checked above
    from sglang.srt.server_args import prepare_server_args

    from sglx_platform.platforms.base import server_arg_defaults
    from sglx_platform.server_args import explicit_fields, plan

    try:
        args = prepare_server_args(list(argv))
    except SystemExit:
        checks.append(
            Check(
                "server args",
                "fail",
                "sglang rejected the arguments (see above)",
                FailureClass.CONFIG_REFUSED,
                "fix the flags sglang names",
            )
        )
        return
    defaults = server_arg_defaults()
    current = {name: getattr(args, name) for name in defaults if hasattr(args, name)}
    decided = plan(profile, current, explicit_fields(current, defaults))
    for refusal in decided.refusals:
        checks.append(
            Check(
                "server args",
                "fail",
                f"{refusal.field}={refusal.value!r}: {refusal.reason}",
                FailureClass.CONFIG_REFUSED,
                f"use {refusal.instead}" if refusal.instead else None,
            )
        )
    for warning in decided.warnings:
        checks.append(Check("server args", "warn", str(warning)))
    if not decided.refusals:
        applied = ", ".join(f"{k}={v}" for k, v in decided.writes.items()) or "none"
        checks.append(Check("server args", "pass", f"accepted; profile defaults: {applied}"))


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="sglx-preflight",
        description="Check, in seconds and without loading the model, that SGLang can serve "
        "here: sglx plugin discovery, arch detection, device nodes and permissions, required "
        "libraries, imports, the first device operation, and the server arguments against the "
        "image's arch profile. Failures are classified (plugin_not_found, device_init_failed, "
        "symbol_not_found, init_hang, config_refused) and come with the fix.",
        epilog="exit codes: 0 all checks passed, 1 a check failed, 2 preflight could not run. "
        "Server arguments go after --, e.g. sglx-preflight -- --model-path /models/demo",
    )
    parser.add_argument("--json", action="store_true", help="one JSON envelope on stdout")
    parser.add_argument(
        "--profile",
        type=Path,
        help=f"arch profile (default: ${PROFILE_ENV} or /etc/sglx/arch.yaml)",
    )
    parser.add_argument(
        "--probe-root",
        type=Path,
        help=f"read sysfs//dev/proc under this root (default: ${PROBE_ROOT_ENV} or /)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        help="seconds for library loading, imports and device init (default 120)",
    )
    parser.add_argument(
        "--no-device-init", action="store_true", help="skip the first device operation"
    )
    args, server_argv = _split(parser, argv)
    if args.profile:
        os.environ[PROFILE_ENV] = str(args.profile)
    if args.probe_root:
        os.environ[PROBE_ROOT_ENV] = str(args.probe_root)
    try:
        result = run(server_argv, device_init=not args.no_device_init, timeout_s=args.timeout)
    except SglxError as exc:
        return render(error_result(("preflight",), exc), as_json=args.json)
    except KeyboardInterrupt:
        return EXIT_ERROR
    return render(result, as_json=args.json)


def _split(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None
) -> tuple[argparse.Namespace, list[str]]:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" in argv:
        cut = argv.index("--")
        return parser.parse_args(argv[:cut]), argv[cut + 1 :]
    return parser.parse_args(argv), []


if __name__ == "__main__":
    sys.exit(main())
