"""Resolve a profile's requirements into a lock with pip's own resolver (`--dry-run --report`).

Nothing is installed: pip resolves for the image's Python and platform (not this machine's)
and reports every wheel with its URL and sha256. Packages the base provides (its torch, triton,
vendor packages) are cut out of the result together with whatever only they needed, and a
requirement naming one of them is refused: the lock must never replace the base's torch.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from packaging.markers import default_environment
from packaging.requirements import Requirement

from sglx.progress import Progress
from sglx.wheels.lockfile import UPLOADED_PRIOR_TO, Lock, Wheel, canonical, inputs_digest
from sglx.wheels.target import Target, target_of
from sglx_core.errors import SglxError
from sglx_core.profile import Profile
from sglx_core.scratch import scratch_dir

PIP_TIMEOUT_S = 1800


def resolve(
    profile: Profile,
    *,
    find_links: Sequence[Path],
    uploaded_prior_to: str,
    progress: Progress,
    pins: Sequence[Wheel] = (),
) -> Lock:
    """The lock of `profile`, resolved from what the index held before `uploaded_prior_to` (an
    ISO 8601 UTC time, recorded in the lock's header): the same inputs and cutoff resolve to
    the same lock on any later day, whatever was uploaded since. `pins` constrain the
    resolution to those versions (pip's --constraint), to ask whether a lock still resolves."""
    target = target_of(profile)
    provided = {canonical(n) for n in profile.base.provides}
    requirements = {canonical(n): spec for n, spec in profile.python.requirements.items()}
    clash = sorted(set(requirements) & provided)
    if clash:
        raise SglxError(
            f"{profile.arch}: python.requirements names {', '.join(clash)}, which the base "
            f"provides ({profile.base.ref}); a lock must never replace the base's packages",
            hint="remove them from python.requirements (or from base.provides if the base "
            "really lacks them)",
            code="lock_replaces_base",
        )
    no_deps = {canonical(n) for n in profile.python.no_deps}
    notes = []
    if profile.sglang.wheel == "source" and not find_links:
        requirements.pop("sglang", None)
        no_deps.discard("sglang")
        notes.append(
            f"sglang {profile.sglang.version} is not pinned: {profile.arch} needs a wheel "
            f"built from source for Python {profile.python.version}; build it, then run "
            f"`sglx wheels lock --arch {profile.arch} --find-links DIR` with DIR holding it"
        )
    with_deps = [f"{n}{s}" for n, s in sorted(requirements.items()) if n not in no_deps]
    without = [f"{n}{s}" for n, s in sorted(requirements.items()) if n in no_deps]
    progress(
        f"resolving {len(with_deps)} requirements for {target.describe()}, from uploads "
        f"before {uploaded_prior_to}"
    )
    constraints = [f"{w.name}=={w.version}" for w in pins]
    resolved = _pip_report(
        with_deps, target, find_links, uploaded_prior_to, constraints, no_deps=False
    )
    if without:
        progress(f"pinning {', '.join(without)} without their declared dependencies")
        resolved += _pip_report(
            without, target, find_links, uploaded_prior_to, constraints, no_deps=True
        )
    kept = _prune(resolved, roots=set(requirements), provided=provided, target=target)
    wheels = tuple(sorted((_wheel(item) for item in kept), key=lambda w: canonical(w.name)))
    inputs = inputs_digest(profile)
    header: dict[str, object] = {
        "arch": profile.arch,
        "inputs": inputs,
        "python": target.python_version,
        "platforms": list(target.platforms),
        "sglang": "pinned" if "sglang" in {canonical(w.name) for w in wheels} else "unpinned",
        UPLOADED_PRIOR_TO: uploaded_prior_to,
        "wheels": len(wheels),
    }
    return Lock(profile.arch, inputs, header, wheels, tuple(notes))


def _pip_report(
    requirements: list[str],
    target: Target,
    find_links: Sequence[Path],
    uploaded_prior_to: str,
    constraints: Sequence[str],
    *,
    no_deps: bool,
) -> list[dict[str, Any]]:
    with scratch_dir("sglx-lock-") as scratch:
        report = scratch / "report.json"
        pinned = scratch / "constraints.txt"
        pinned.write_text("".join(f"{c}\n" for c in constraints))
        argv = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "--quiet",
            "--disable-pip-version-check",
            "--report",
            str(report),
            "--target",
            str(scratch / "target"),
            # pip 26's upload-time cutoff (PEP 700's upload-time in the index's JSON API);
            # files without one (a --find-links folder) are not excluded by it.
            "--uploaded-prior-to",
            uploaded_prior_to,
            *target.pip_args(),
        ]
        argv += ["--no-deps"] if no_deps else []
        argv += ["--constraint", str(pinned)] if constraints else []
        for folder in find_links:
            argv += ["--find-links", str(folder)]
        proc = subprocess.run(
            [*argv, *requirements],
            capture_output=True,
            text=True,
            timeout=PIP_TIMEOUT_S,
            check=False,
        )
        if proc.returncode != 0:
            errors = [line for line in proc.stderr.splitlines() if line.startswith("ERROR")]
            raise SglxError(
                "pip could not resolve the requirements for this arch:\n    "
                + "\n    ".join(errors[-6:] or proc.stderr.splitlines()[-6:]),
                hint="check python.requirements in the profile and that the index (or "
                "--find-links) has wheels for this Python and platform",
                code="resolution_failed",
            )
        items: list[dict[str, Any]] = json.loads(report.read_text())["install"]
        return items


def _prune(
    items: list[dict[str, Any]], *, roots: set[str], provided: set[str], target: Target
) -> list[dict[str, Any]]:
    """The items reachable from `roots` without passing through a base-provided package.

    Extras travel with the requirement that asks for them: `cuda-toolkit[cudart]` brings in
    what cuda-toolkit's `extra == "cudart"` dependencies name.
    """
    by_name = {canonical(i["metadata"]["name"]): i for i in items}
    environment = _marker_environment(target)
    extras_seen: dict[str, set[str]] = {}
    todo: list[tuple[str, frozenset[str]]] = [(r, frozenset()) for r in roots if r in by_name]
    while todo:
        name, extras = todo.pop()
        if name in provided:
            continue
        seen = extras_seen.get(name)
        if seen is not None and extras <= seen:
            continue
        extras_seen[name] = (seen or set()) | extras
        for dependency, wanted in _dependencies(by_name[name], extras, environment):
            if dependency in by_name:
                todo.append((dependency, wanted))
    return [by_name[name] for name in sorted(extras_seen)]


def _dependencies(
    item: dict[str, Any], extras: frozenset[str], environment: dict[str, str]
) -> Iterable[tuple[str, frozenset[str]]]:
    """(name, extras asked of it) for each dependency that applies on the target."""
    for text in item["metadata"].get("requires_dist") or []:
        requirement = Requirement(text)
        marker = requirement.marker
        if marker is None or any(
            marker.evaluate({**environment, "extra": extra}) for extra in (*extras, "")
        ):
            yield canonical(requirement.name), frozenset(requirement.extras)


def _marker_environment(target: Target) -> dict[str, str]:
    """PEP 508 marker values of the image's interpreter, not this machine's."""
    environment: dict[str, str] = {k: str(v) for k, v in default_environment().items()}
    environment.update(
        python_version=target.python_version,
        python_full_version=f"{target.python_version}.0",
        implementation_name="cpython",
        platform_python_implementation="CPython",
        sys_platform="linux",
        platform_system="Linux",
        platform_machine=target.machine,
    )
    return environment


def _wheel(item: dict[str, Any]) -> Wheel:
    info = item["download_info"]
    digest = (info.get("archive_info") or {}).get("hashes", {}).get("sha256")
    name = item["metadata"]["name"]
    if not digest:
        raise SglxError(
            f"pip reported no sha256 for {name} ({info.get('url')})",
            hint="use an index that publishes hashes",
            code="resolution_failed",
        )
    filename = unquote(Path(urlparse(info["url"]).path).name)
    return Wheel(name, item["metadata"]["version"], digest, filename)
