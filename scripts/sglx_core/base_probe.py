"""What a base image declares it ships, read inside it by the base's own Python.

This file runs as a script in the base (standard library only: the base's Python may be any
3.x and has no sglx): `sglx image build` runs it in a throwaway container of the base before
building (`probe`), and images/<arch>/deps.sh runs it again in the container that installs the
venv (`filter`), against what the base actually has, so that only the locked wheels the base
lacks go in.

Declarations are read the way upstream's images make them: Python distributions by their pip
metadata, ROCm by its version file. A ROCm that apt installed (7.x) declares itself in
/opt/rocm/.info/version; TheRock's native packages (ROCm >= 7.11) in
/opt/rocm/core/.info/version (ROCm/TheRock#5475: /opt/rocm holds only links there); the pip SDK
of upstream's ROCm 10 images (rocm-sdk-core, in site-packages, with /opt/rocm a link to its
_rocm_sdk_devel tree: sglang docker/rocm.Dockerfile, stage rocm1000-base) by the version of the
rocm-sdk-core distribution, which is the ROCm release ("pip show rocm-sdk-core" is how sglang's
own build scripts read it). The first of the three that declares a version wins.

`link` makes the venv sglx builds see this interpreter's site-packages when this interpreter is
itself a venv (upstream's ROCm 10 images serve from /opt/venv): `python -m venv
--system-site-packages` run by a venv's interpreter sees the system Python's packages, not the
venv's.
"""

from __future__ import annotations

import json
import re
import site
import sys
from importlib.metadata import distributions
from pathlib import Path

# Where a ROCm install declares its release, in the order read (see the module docstring).
ROCM_VERSION_FILES = (Path("/opt/rocm/.info/version"), Path("/opt/rocm/core/.info/version"))
ROCM_SDK_DISTRIBUTION = "rocm-sdk-core"
LINK_NAME = "sglx-base.pth"
MAX_VERSION_FILE = 4096
# A requirement line of an sglx lock: "name==version \", then "    --hash=sha256:..." lines.
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")
MISMATCH_EXIT = 3


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed() -> dict[str, str]:
    """Every distribution the interpreter sees: canonical name -> version."""
    found: dict[str, str] = {}
    for dist in distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(canonical(name), dist.version)
    return found


def _version_file(path: Path) -> str | None:
    try:
        with path.open("rb") as handle:
            text = handle.read(MAX_VERSION_FILE).decode(errors="replace").strip()
    except OSError:
        return None
    return text.splitlines()[0].strip() if text else None


def rocm_version(dists: dict[str, str] | None = None) -> str | None:
    """The base's ROCm release: a version file (through /opt/rocm, which may be a link), else
    the version of the ROCm pip SDK's core distribution; None when nothing declares one."""
    for path in ROCM_VERSION_FILES:
        found = _version_file(path)
        if found:
            return found
    return (installed() if dists is None else dists).get(ROCM_SDK_DISTRIBUTION)


def facts() -> dict[str, object]:
    dists = installed()
    return {
        "python": "{}.{}.{}".format(*sys.version_info[:3]),
        "executable": sys.executable,
        "rocm": rocm_version(dists),
        "distributions": dists,
    }


def link_line(site_dirs: list[str]) -> str:
    """A .pth line that adds each folder as a site folder (its own .pth files, e.g. those of
    editable installs, are processed too: a plain path line would skip them)."""
    return "import site; " + "; ".join(f"site.addsitedir({d!r})" for d in site_dirs) + "\n"


def link(venv: Path) -> Path | None:
    """Make `venv` (created by this interpreter) see this interpreter's site-packages; None
    when this interpreter is not a venv (--system-site-packages already covers it)."""
    if sys.prefix == sys.base_prefix:
        return None
    major, minor = sys.version_info[:2]
    target = venv / "lib" / f"python{major}.{minor}" / "site-packages" / LINK_NAME
    target.write_text(link_line(site.getsitepackages()))
    return target


def filter_lock(lock: str, have: dict[str, str]) -> tuple[str, list[str], list[str]]:
    """The lock's entries for distributions the base lacks, the names installed, and the
    names kept from the base ("name base-version (lock: version)")."""
    out: list[str] = []
    missing: list[str] = []
    kept: list[str] = []
    keep = False
    for line in lock.splitlines():
        match = PIN.match(line)
        if match:
            name, version = canonical(match.group(1)), match.group(2)
            keep = name not in have
            if keep:
                missing.append(f"{name}=={version}")
            else:
                kept.append(f"{name} {have[name]} (lock: {version})")
        elif not line.startswith(" "):
            keep = False
        if keep:
            out.append(line)
    return "".join(f"{line}\n" for line in out), missing, kept


def main(argv: list[str]) -> int:
    if argv[:1] == ["probe"]:
        print(json.dumps(facts(), sort_keys=True))
        return 0
    if len(argv) == 5 and argv[0] == "filter":
        lock, sglang, out, report = argv[1:]
        have = installed()
        found = have.get("sglang")
        if sglang != "-" and found != sglang:
            shown = f"sglang {found}" if found else "no sglang"
            print(
                f"sglx: the base ships {shown}; this sglx's plugin supports sglang {sglang} "
                "(load the base the profile names, or use a profile for that sglang)",
                file=sys.stderr,
            )
            return MISMATCH_EXIT
        text, missing, kept = filter_lock(Path(lock).read_text(), have)
        Path(out).write_text(text)
        Path(report).write_text(
            json.dumps({**facts(), "installed": missing, "kept": kept}, indent=1, sort_keys=True)
        )
        for line in kept:
            print(f"sglx: keeping the base's {line}")
        print(f"sglx: installing {len(missing)} locked wheels the base lacks")
        return 0
    if len(argv) == 2 and argv[0] == "link":
        written = link(Path(argv[1]))
        if written is not None:
            print(f"sglx: {written} adds the site-packages of {sys.prefix}")
        return 0
    usage = "usage: base_probe.py probe | filter LOCK SGLANG|- OUT REPORT | link VENV"
    print(usage, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
