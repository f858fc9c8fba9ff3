"""Resolve DT_NEEDED the way glibc's dynamic loader does, inside a scanned root, without running it.

For each scanned file we compute what `ldd FILE` would list: the file is the main object, its
dependencies are mapped breadth first, and each name is looked up like `_dl_map_object` in
glibc's elf/dl-load.c:

1. A name already loaded (as requested, or as an object's DT_SONAME) is that object, found again
   without searching; so is a file found under another name (same file, e.g. via a symlink).
2. A name with a slash is a path (absolute paths are re-rooted; a relative one is taken from `/`,
   since the working directory of the future process is unknown).
3. Otherwise the directories are tried in this order, and the first file that is an ELF object
   of the main object's class, byte order and machine wins (others are skipped, as
   `open_verify` skips a 32-bit library when a 64-bit one is wanted; a file cut short ends the
   search as BROKEN, as it ends glibc's; one that cannot be opened is passed over and is the
   BROKEN answer only if nothing usable follows):
   a. DT_RPATH of the requesting object, then of the object that loaded it, and so on up to the
      main object, but only when the requesting object has no DT_RUNPATH;
   b. LD_LIBRARY_PATH (from the image's environment);
   c. DT_RUNPATH of the requesting object only (it is not inherited);
   d. the `ld.so.cache` directories, from the root's `/etc/ld.so.conf` (see `ldconf`);
   e. the system directories (see `abi`), unless the requester has DF_1_NODEFLIB.
   `$ORIGIN` is the directory of the path the object was found at (not following the file's own
   link, as glibc does), `$LIB` and `$PLATFORM` are the root's (see `abi`). DT_RPATH is ignored
   when DT_RUNPATH is present.

The program interpreter (PT_INTERP, or the standard one for libraries) is loaded first, as it is
in every process. Lookups are cached by (name, search path), so a tree of thousands of files
resolves in a fraction of a second after the files are read.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from sglx.scan.abi import LoaderDefaults, loader_defaults
from sglx.scan.elf import TRUNCATED, UNREADABLE, ElfInfo, ElfKind, FileProblem, inspect_elf
from sglx_core.ldconf import cache_may_hold, conf_dirs
from sglx_core.rootfs import Kind, RootFS

_DST = re.compile(r"\$(?:\{(ORIGIN|LIB|PLATFORM)\}|(ORIGIN|LIB|PLATFORM)(?![A-Za-z0-9_]))")

# How a needed name was satisfied.
FOUND = "found"  # found by searching (or by path)
LOADED = "loaded"  # an object already in the process had this name
HOST = "host_provided"  # not in the root, and the arch profile says the host provides it
MISSING = "missing"  # not found anywhere the loader looks
BROKEN = "broken"  # the file the loader would use is cut short, or cannot be read


class ElfCache:
    """Parsed ELF facts by canonical virtual path; files outside the scanned set are read lazily."""

    def __init__(self, rootfs: RootFS) -> None:
        self.rootfs = rootfs
        self.infos: dict[str, ElfInfo | None] = {}
        self.problems: dict[str, FileProblem] = {}

    def add(self, canonical: str, info: ElfInfo | None, problem: FileProblem | None = None) -> None:
        self.infos[canonical] = info
        if problem is not None:
            self.problems[canonical] = problem

    def get(self, canonical: str) -> ElfInfo | None:
        """The ELF facts of a regular file, None if it is not a readable ELF file."""
        if canonical in self.infos:
            return self.infos[canonical]
        info, problem = inspect_elf(self.rootfs.host_path(canonical))
        self.add(canonical, info, problem)
        return info

    def broken(self, canonical: str) -> FileProblem | None:
        """Why the loader cannot use this file although it is there: cut short, or unreadable."""
        problem = self.problems.get(canonical)
        return problem if problem is not None and problem.kind in (TRUNCATED, UNREADABLE) else None


@dataclass(frozen=True, slots=True)
class SearchDir:
    path: str  # virtual directory, DSTs expanded
    source: str  # "RPATH", "LD_LIBRARY_PATH", "RUNPATH", "ld.so.conf", "system"

    @property
    def cache_only(self) -> bool:
        return self.source == "ld.so.conf"


@dataclass(frozen=True, slots=True)
class Resolution:
    """One DT_NEEDED entry (or PT_INTERP) of one object, as resolved in one process."""

    requester: str  # canonical path of the object that needs it
    name: str  # the needed name, DSTs expanded
    how: str  # FOUND, LOADED, HOST or MISSING
    target: str | None  # canonical path of the object that satisfies it
    searched: tuple[str, ...] = ()  # directories tried, when MISSING, BROKEN or HOST
    interpreter: bool = False  # this is the PT_INTERP of the requester
    problem: FileProblem | None = None  # what is wrong with `target`, when BROKEN


# (path it was found at, canonical path, ELF facts)
_Candidate = tuple[str, str, ElfInfo]


class _Broken(NamedTuple):
    """The file a lookup ends at, which the loader cannot use (see `Loader._find`)."""

    canonical: str
    problem: FileProblem


@dataclass(slots=True)
class _Loaded:
    path: str  # the path it was found at: $ORIGIN is its directory
    canonical: str
    info: ElfInfo
    chain: tuple[SearchDir, ...]  # DT_RPATH dirs of this object and of those that loaded it


@dataclass
class Closure:
    """Everything one scanned file loads: what `ldd FILE` shows, and how each name resolved."""

    root: str
    kind: ElfKind
    objects: list[str] = field(default_factory=list)  # canonical paths, load order
    resolutions: list[Resolution] = field(default_factory=list)

    def by_name(self) -> dict[str, str | None]:
        """First outcome for each needed name (canonical target, None if missing), like ldd."""
        out: dict[str, str | None] = {}
        for res in self.resolutions:
            if not res.interpreter:
                out.setdefault(res.name, res.target)
        return out


class Loader:
    """Resolves the closures of files in one root (see the module docstring for the rules)."""

    def __init__(
        self,
        rootfs: RootFS,
        elves: ElfCache,
        *,
        ld_library_path: Iterable[str] = (),
        host_provided: Callable[[str], bool] = lambda name: False,
    ) -> None:
        self.rootfs = rootfs
        self.elves = elves
        self.ld_library_path = tuple(
            part for value in ld_library_path for part in re.split("[:;]", value) if part
        )
        self.host_provided = host_provided
        self.conf_dirs = conf_dirs(rootfs)
        self._defaults: dict[ElfKind, LoaderDefaults] = {}
        self._expanded: dict[tuple[str, tuple[str, ...], str, ElfKind], tuple[SearchDir, ...]] = {}
        self._search_ids: dict[tuple[object, ...], int] = {}
        self._searches: list[tuple[SearchDir, ...]] = []
        self._found: dict[tuple[str, int], _Candidate | _Broken | None] = {}
        self._system: dict[tuple[ElfKind, bool], tuple[SearchDir, ...]] = {}

    def defaults(self, kind: ElfKind) -> LoaderDefaults:
        found = self._defaults.get(kind)
        if found is None:
            found = self._defaults[kind] = loader_defaults(self.rootfs, kind)
        return found

    def default_search(self, kind: ElfKind) -> tuple[SearchDir, ...]:
        """Where `dlopen("libx.so")` looks from an object without RPATH/RUNPATH."""
        origin = "/"
        return self._expand(
            origin, self.ld_library_path, "LD_LIBRARY_PATH", kind
        ) + self._system_dirs(kind, nodeflib=False)

    def closure(self, root: str) -> Closure:
        """What loading the file at canonical path `root` as a program maps, name by name."""
        info = self.elves.get(root)
        if info is None:
            raise ValueError(f"{root} is not a readable ELF file")
        kind = info.kind
        closure = Closure(root=root, kind=kind, objects=[root])
        origin = posixpath.dirname(root)
        main = _Loaded(root, root, info, self._expand(origin, info.rpath, "RPATH", kind))
        by_name: dict[str, _Loaded] = {}
        by_file: dict[str, _Loaded] = {root: main}
        if info.soname:
            by_name[info.soname] = main
        self._load_interpreter(closure, info, by_name, by_file)
        ldlp = self._expand(origin, self.ld_library_path, "LD_LIBRARY_PATH", kind)
        queue = [main]
        index = 0
        while index < len(queue):
            obj = queue[index]
            index += 1
            search_id = -1
            for raw in obj.info.needed:
                name = self._expand_name(raw, obj, kind) if "$" in raw else raw
                hit = by_name.get(name)
                if hit is not None:
                    closure.resolutions.append(
                        Resolution(obj.canonical, name, LOADED, hit.canonical)
                    )
                    continue
                if "/" in name:
                    found = self._open_path(name, kind)
                    searched: tuple[str, ...] = (name,)
                else:
                    if search_id < 0:
                        search_id = self._search_id(obj, ldlp, kind)
                    found = self._find(name, search_id, kind)
                    searched = ()
                if found is None or isinstance(found, _Broken):
                    if not searched:
                        searched = tuple(dict.fromkeys(d.path for d in self._searches[search_id]))
                    if isinstance(found, _Broken):
                        closure.resolutions.append(
                            Resolution(
                                obj.canonical,
                                name,
                                BROKEN,
                                found.canonical,
                                searched,
                                problem=found.problem,
                            )
                        )
                        continue
                    how = HOST if self.host_provided(name) else MISSING
                    closure.resolutions.append(Resolution(obj.canonical, name, how, None, searched))
                    continue
                path, canonical, child_info = found
                known = by_file.get(canonical)
                if known is not None:  # the same file under another name
                    by_name[name] = known
                    closure.resolutions.append(Resolution(obj.canonical, name, LOADED, canonical))
                    continue
                chain = obj.chain
                if child_info.rpath:
                    origin = posixpath.dirname(path)
                    chain = self._expand(origin, child_info.rpath, "RPATH", kind) + chain
                child = _Loaded(path, canonical, child_info, chain)
                by_name[name] = child
                if child_info.soname:
                    by_name.setdefault(child_info.soname, child)
                by_file[canonical] = child
                queue.append(child)
                closure.objects.append(canonical)
                closure.resolutions.append(Resolution(obj.canonical, name, FOUND, canonical))
        return closure

    # -- pieces -------------------------------------------------------------------------------

    def _load_interpreter(
        self,
        closure: Closure,
        info: ElfInfo,
        by_name: dict[str, _Loaded],
        by_file: dict[str, _Loaded],
    ) -> None:
        """Map the program interpreter first, as the kernel does before the loader runs."""
        path = info.interpreter or self.defaults(info.kind).interpreter
        if path is None:
            return
        found = self._open_path(path, info.kind)
        if found is None or isinstance(found, _Broken):
            if info.interpreter is not None:
                how, target = (MISSING, None) if found is None else (BROKEN, found.canonical)
                problem = None if found is None else found.problem
                closure.resolutions.append(
                    Resolution(
                        closure.root, path, how, target, (path,), interpreter=True, problem=problem
                    )
                )
            return
        _, canonical, interp_info = found
        loaded = _Loaded(path, canonical, interp_info, ())
        by_file.setdefault(canonical, loaded)
        by_name.setdefault(path, loaded)
        by_name.setdefault(interp_info.soname or posixpath.basename(path), loaded)
        if info.interpreter is not None:
            closure.resolutions.append(
                Resolution(closure.root, path, FOUND, canonical, interpreter=True)
            )

    def _open_path(self, name: str, kind: ElfKind) -> _Candidate | _Broken | None:
        path = name if name.startswith("/") else f"/{name}"
        canonical = self.rootfs.resolve(path)
        if canonical is None or self.rootfs.kind(canonical) is not Kind.FILE:
            return None
        info = self._fitting(canonical, kind)
        if info is not None:
            return (path, canonical, info)
        problem = self.elves.broken(canonical)
        return None if problem is None else _Broken(canonical, problem)

    def _fitting(self, canonical: str, kind: ElfKind) -> ElfInfo | None:
        """The file's ELF facts if the loader would accept it for a `kind` process."""
        info = self.elves.get(canonical)
        if info is None or info.kind != kind or not info.loadable:
            return None
        return info

    def _find(self, name: str, search_id: int, kind: ElfKind) -> _Candidate | _Broken | None:
        """The first usable file of that name on the search path, as glibc's `open_path`.

        A file cut short stops the search (glibc's `open_verify` fails the whole load on a short
        read); one that cannot be opened is passed over (glibc goes on after EACCES) and is the
        answer only if nothing usable comes after it.
        """
        key = (name, search_id)
        if key in self._found:
            return self._found[key]
        result: _Candidate | _Broken | None = None
        unreadable: _Broken | None = None
        cacheable = cache_may_hold(name)
        for directory in self._searches[search_id]:
            if directory.cache_only and not cacheable:
                continue
            canonical = self.rootfs.find_file(directory.path, name)
            if canonical is None:
                continue
            info = self._fitting(canonical, kind)
            if info is not None:
                result = (f"{directory.path.rstrip('/')}/{name}", canonical, info)
                break
            problem = self.elves.broken(canonical)
            if problem is not None and problem.kind == TRUNCATED:
                result = _Broken(canonical, problem)
                break
            if problem is not None and problem.kind == UNREADABLE and unreadable is None:
                unreadable = _Broken(canonical, problem)
        self._found[key] = result or unreadable
        return result or unreadable

    def _search_id(self, obj: _Loaded, ldlp: tuple[SearchDir, ...], kind: ElfKind) -> int:
        runpath = obj.info.runpath
        if runpath is None:
            dirs = obj.chain + ldlp
        else:
            dirs = ldlp + self._expand(posixpath.dirname(obj.path), runpath, "RUNPATH", kind)
        dirs += self._system_dirs(kind, nodeflib=obj.info.nodeflib)
        key = (dirs, kind)
        found = self._search_ids.get(key)
        if found is None:
            found = self._search_ids[key] = len(self._searches)
            self._searches.append(dirs)
        return found

    def _system_dirs(self, kind: ElfKind, *, nodeflib: bool) -> tuple[SearchDir, ...]:
        key = (kind, nodeflib)
        found = self._system.get(key)
        if found is None:
            found = self._system[key] = self._make_system_dirs(kind, nodeflib=nodeflib)
        return found

    def _make_system_dirs(self, kind: ElfKind, *, nodeflib: bool) -> tuple[SearchDir, ...]:
        defaults = self.defaults(kind)
        system = () if nodeflib else defaults.system_dirs
        # DF_1_NODEFLIB also drops cache entries that live in the system directories.
        conf = [d for d in self.conf_dirs if not (nodeflib and d in defaults.system_dirs)]
        return tuple(SearchDir(d, "ld.so.conf") for d in conf) + tuple(
            SearchDir(d, "system") for d in system
        )

    def _expand(
        self, origin: str, paths: tuple[str, ...], source: str, kind: ElfKind
    ) -> tuple[SearchDir, ...]:
        if not paths:
            return ()
        key = (origin, paths, source, kind)
        found = self._expanded.get(key)
        if found is None:
            defaults = self.defaults(kind)
            dirs = []
            for raw in paths:
                if not raw:
                    continue  # an empty entry means the working directory, unknown here
                path = _substitute(raw, origin, defaults) if "$" in raw else raw
                if path.startswith("/"):
                    dirs.append(SearchDir(path.rstrip("/") or "/", source))
            found = self._expanded[key] = tuple(dirs)
        return found

    def _expand_name(self, raw: str, obj: _Loaded, kind: ElfKind) -> str:
        return _substitute(raw, posixpath.dirname(obj.path), self.defaults(kind))


def _substitute(raw: str, origin: str, defaults: LoaderDefaults) -> str:
    values = {"ORIGIN": origin, "LIB": defaults.lib, "PLATFORM": defaults.platform}
    return _DST.sub(lambda m: values[m.group(1) or m.group(2)], raw)
