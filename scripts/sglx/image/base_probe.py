"""What a base image declares it ships, read inside it by the base's own Python.

This file runs as a script in the base (standard library only: the base's Python may be any
3.x and has no sglx): `sglx image build` runs it in a throwaway container of the base before
building (`probe`), and the Dockerfile's deps stage runs it again inside the build (`filter`),
against what the base actually has, so that only the locked wheels the base lacks go in.

Declarations are read the way upstream's images make them: Python distributions by their pip
metadata, ROCm by /opt/rocm/.info/version.
"""

from __future__ import annotations

import json
import re
import sys
from importlib.metadata import distributions
from pathlib import Path

ROCM_VERSION_FILE = Path("/opt/rocm/.info/version")
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


def rocm_version() -> str | None:
    try:
        with ROCM_VERSION_FILE.open("rb") as handle:
            text = handle.read(MAX_VERSION_FILE).decode(errors="replace").strip()
    except OSError:
        return None
    return text.splitlines()[0].strip() if text else None


def facts() -> dict[str, object]:
    return {
        "python": "{}.{}.{}".format(*sys.version_info[:3]),
        "executable": sys.executable,
        "rocm": rocm_version(),
        "distributions": installed(),
    }


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
    print("usage: base_probe.py probe | filter LOCK SGLANG|- OUT REPORT", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
