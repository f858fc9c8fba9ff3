"""Version orderings of the ecosystems an audit meets, each the ecosystem's own library's:
PyPI's (PEP 440, `packaging`), Debian's (dpkg's, `python-debian`) and SemVer 2.0's (`semver`,
OSV's SEMVER ranges). A version an ordering cannot read is None: the range is then not judged,
and the report says so."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Key = Callable[[str], Any]


def pypi(text: str) -> Any:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(text)
    except InvalidVersion:
        return None


def debian(text: str) -> Any:
    from debian.debian_support import Version

    try:
        return Version(text)
    except ValueError:
        return None


def semver(text: str) -> Any:
    import semver as semver_lib

    try:
        return semver_lib.Version.parse(text.removeprefix("v"))
    except (ValueError, TypeError):
        return None


def ordering(ecosystem: str) -> Key | None:
    """The ECOSYSTEM ordering of an OSV ecosystem name (`PyPI`, `Debian`, `Debian:12`)."""
    family = ecosystem.partition(":")[0]
    return {"PyPI": pypi, "Debian": debian}.get(family)
