"""The environment an image's committed Dockerfile bakes (its ENV instruction), as a dict.

Tests compare what a process received with what the Dockerfile says, so they read the file as
it landed rather than the profile it was rendered from.
"""

from __future__ import annotations

import shlex
from pathlib import Path


def dockerfile_env(dockerfile: Path, path: str = "/usr/bin:/bin") -> dict[str, str]:
    """Every `ENV name=value` of the file; `$PATH` in a value expands to `path`."""
    env: dict[str, str] = {}
    logical: list[str] = []
    for line in dockerfile.read_text().splitlines():
        if logical or line.startswith("ENV "):
            logical.append(line.rstrip("\\").strip())
            if not line.endswith("\\"):
                for word in shlex.split(" ".join(logical)[len("ENV ") :]):
                    name, _, value = word.partition("=")
                    env[name] = value.replace("$PATH", path)
                logical = []
    return env
