"""A directory read as the `/` of another system, the way a process chrooted into it sees it.

Paths inside the root ("virtual paths") always start with `/`. Symbolic links are followed inside
the root only: an absolute target is re-rooted, `..` stops at the root, and a link that loops or
points nowhere resolves to None. Nothing is ever followed onto the scanning machine's own files.
`..` is resolved physically (the parent of where a link led), as the kernel does when the loader
opens `$ORIGIN/../lib/libfoo.so`. As in the kernel, one lookup follows at most MAX_LINKS links in
all; past that the loader's open() fails with ELOOP, and the path resolves to None here. The walk
is a loop, not a recursion, so a tree thousands of folders deep or a long chain of links costs
time in proportion, never Python's recursion limit.

Directory listings and resolutions are cached: a scan resolves the same few hundred directories
hundreds of thousands of times.

`placeholders` are regular files the unpacking kept as names only (layers.RootWriter): they are
listed, resolved and globbed like the files on disk, and have no content to read.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

MAX_LINKS = 40
"""Links one path lookup may follow: Linux's MAXSYMLINKS (the 41st fails open() with ELOOP)."""


class Kind(Enum):
    FILE = "file"
    DIR = "dir"
    LINK = "link"
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class Step:
    """Where a path lookup ended: the canonical virtual path and what is there (both None when
    nothing is), and how many links the lookup followed to get there."""

    path: str | None
    kind: Kind | None
    links: int


Lookup = Callable[[str, str], "tuple[Kind | None, str | None]"]
"""(canonical dir, name) -> what `name` is in that dir (None: nothing), and a link's target."""

_ROOT = Step("/", Kind.DIR, 0)


def follow(
    lookup: Lookup, vpath: str, cache: dict[str, Step], keep: Callable[[Step], bool]
) -> Step:
    """Look `vpath` up from `/` as the kernel walks a path, component by component, following
    links inside the root (see the module docstring). Every prefix the walk completes is kept
    in `cache` when `keep` accepts its step, and a later lookup starts from its longest cached
    prefix: a step records its own link count, so the MAX_LINKS budget stays exact."""
    found = cache.get(vpath)
    if found is not None:
        return found
    parts = [p for p in vpath.split("/") if p]
    prefix = "/" + "/".join(parts)
    done = len(parts)
    start = cache.get(prefix)
    while start is None and done:
        prefix = prefix[: prefix.rfind("/")] or "/"
        done -= 1
        start = cache.get(prefix)
    step = start or _ROOT
    for part in parts[done:]:
        step = _advance(lookup, step, part)
        prefix = f"/{part}" if prefix == "/" else f"{prefix}/{part}"
        if keep(step):
            cache[prefix] = step
        if step.path is None:
            break
    if keep(step):
        cache[vpath] = step
    return step


def _advance(lookup: Lookup, start: Step, part: str) -> Step:
    """The step after one more component of a path, with the links it names followed."""
    current, kind, links = start.path, start.kind, start.links
    pending = [part]
    while pending:
        name = pending.pop()
        if current is None or kind is not Kind.DIR:
            return Step(None, None, links)  # ENOTDIR, or nothing there
        if name in ("", "."):
            continue
        if name == "..":
            current = current.rpartition("/")[0] or "/"
            continue
        found, target = lookup(current, name)
        if found is Kind.LINK:
            links += 1
            if links > MAX_LINKS or target is None:
                return Step(None, None, links)  # ELOOP, or an unreadable link
            if target.startswith("/"):
                current = "/"
            pending.extend(reversed(target.split("/")))
            continue
        if found is None:
            return Step(None, None, links)
        current, kind = _join(current, name), found
    return Step(current, kind, links)


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
        self._resolved: dict[str, Step] = {}

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
        return follow(self._entry, vpath, self._resolved, _always).path

    def _entry(self, directory: str, name: str) -> tuple[Kind | None, str | None]:
        entries = self.listing(directory)
        kind = None if entries is None else entries.get(name)
        if kind is not Kind.LINK:
            return kind, None
        try:
            return kind, str(Path(self.host_path(_join(directory, name))).readlink())
        except OSError:
            return kind, None

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


def _always(step: Step) -> bool:
    return True


def _join(base: str, name: str) -> str:
    return f"/{name}" if base == "/" else f"{base}/{name}"
