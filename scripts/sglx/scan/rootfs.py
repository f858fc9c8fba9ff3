"""A directory read as the `/` of another system, the way a process chrooted into it sees it.

Paths inside the root ("virtual paths") always start with `/`. Symbolic links are followed inside
the root only: an absolute target is re-rooted, `..` stops at the root, and a link that loops or
points nowhere resolves to None. Nothing is ever followed onto the scanning machine's own files.
`..` is resolved physically (the parent of where a link led), as the kernel does when the loader
opens `$ORIGIN/../lib/libfoo.so`.

Directory listings and resolutions are cached: a scan resolves the same few hundred directories
hundreds of thousands of times.

`placeholders` are regular files the unpacking kept as names only (layers.RootWriter): they are
listed, resolved and globbed like the files on disk, and have no content to read.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping
from enum import Enum
from pathlib import Path


class Kind(Enum):
    FILE = "file"
    DIR = "dir"
    LINK = "link"
    OTHER = "other"


class RootFS:
    """Reads files under `root` by virtual path; see the module docstring for the rules."""

    def __init__(
        self, root: Path, placeholders: Mapping[str, frozenset[str]] | None = None
    ) -> None:
        self.root = Path(os.path.realpath(root))
        self._placeholders = dict(placeholders or {})
        # Host path of virtual path v is self._prefix + v ("" for the machine's own /).
        self._prefix = "" if str(self.root) == "/" else str(self.root)
        self._listings: dict[str, dict[str, Kind] | None] = {}
        self._resolved: dict[str, str | None] = {}
        self._resolving: set[str] = set()

    def __repr__(self) -> str:
        return f"RootFS({str(self.root)!r})"

    def host_path(self, canonical: str) -> str:
        """Where a canonical virtual path (one `resolve` returned) lives on this machine."""
        if canonical == "/":
            return self._prefix or "/"
        return self._prefix + canonical

    def listing(self, canonical_dir: str) -> dict[str, Kind] | None:
        """Names in a canonical directory and what each is (no link followed); None if no dir."""
        if canonical_dir in self._listings:
            return self._listings[canonical_dir]
        entries: dict[str, Kind] | None = {}
        try:
            with os.scandir(self.host_path(canonical_dir)) as it:
                for entry in it:
                    if entry.is_symlink():
                        kind = Kind.LINK
                    elif entry.is_dir(follow_symlinks=False):
                        kind = Kind.DIR
                    elif entry.is_file(follow_symlinks=False):
                        kind = Kind.FILE
                    else:
                        kind = Kind.OTHER
                    entries[entry.name] = kind  # type: ignore[index]
        except OSError:
            entries = None
        if entries is not None:
            for name in self.placeholders_in(canonical_dir):
                entries.setdefault(name, Kind.FILE)
        self._listings[canonical_dir] = entries
        return entries

    def placeholders_in(self, canonical_dir: str) -> frozenset[str]:
        """Regular files of a canonical directory that exist by name only (no content)."""
        return self._placeholders.get(canonical_dir, frozenset())

    def resolve(self, vpath: str) -> str | None:
        """The canonical virtual path of what `vpath` names, following every link; None if none."""
        path = vpath.rstrip("/")
        if not path:
            return "/"
        if path in self._resolved:
            return self._resolved[path]
        if path in self._resolving:
            return None  # a symbolic link loop
        self._resolving.add(path)
        try:
            result = self._resolve_last(path)
        finally:
            self._resolving.discard(path)
        self._resolved[path] = result
        return result

    def _resolve_last(self, path: str) -> str | None:
        head, _, name = path.rpartition("/")
        parent = self.resolve(head or "/")
        entries = None if parent is None else self.listing(parent)
        if parent is None or entries is None:
            return None
        if name in ("", "."):
            return parent
        if name == "..":
            return parent.rpartition("/")[0] or "/"
        kind = entries.get(name)
        here = _join(parent, name)
        if kind is not Kind.LINK:
            return None if kind is None else here
        try:
            target = str(Path(self.host_path(here)).readlink())
        except OSError:
            return None
        return self.resolve(target if target.startswith("/") else f"{parent}/{target}")

    def kind(self, canonical: str) -> Kind | None:
        """What a canonical path is (a resolved path is never a link)."""
        if canonical == "/":
            return Kind.DIR
        head, _, name = canonical.rpartition("/")
        entries = self.listing(head or "/")
        return None if entries is None else entries.get(name)

    def find_file(self, vdir: str, name: str) -> str | None:
        """The canonical path of regular file `vdir/name`, following links; None if absent."""
        found = self.resolve(f"{vdir.rstrip('/')}/{name}")
        if found is None or self.kind(found) is not Kind.FILE:
            return None
        return found

    def is_dir(self, vpath: str) -> bool:
        found = self.resolve(vpath)
        return found is not None and self.kind(found) is Kind.DIR

    def glob(self, pattern: str) -> list[str]:
        """Virtual paths matching an absolute path glob (fnmatch per component, links followed).

        As in the shell, a wildcard does not match a leading dot unless the pattern has one.
        """
        current = ["/"]
        for part in [p for p in pattern.split("/") if p and p != "."]:
            following: list[str] = []
            for base in current:
                if not any(c in part for c in "*?["):
                    candidate = _join(base, part)
                    if self.resolve(candidate) is not None:
                        following.append(candidate)
                    continue
                canonical = self.resolve(base)
                entries = None if canonical is None else self.listing(canonical)
                for name in sorted(entries or ()):
                    if name.startswith(".") and not part.startswith("."):
                        continue
                    if fnmatch.fnmatchcase(name, part):
                        following.append(_join(base, name))
            current = following
        return current


def _join(base: str, name: str) -> str:
    return f"/{name}" if base == "/" else f"{base}/{name}"
