"""Find the ELF files of a tree: walk it, skip non-ELF files by their first 4 bytes, read the rest.

Opening files is the cost of a scan: an image holds tens of thousands of Python sources,
bytecode and headers for a few thousand ELF files. Files whose names end in `TEXT_SUFFIXES`
(source, bytecode, markup: formats the loader never maps) are counted but not opened; every other
file is checked by its magic. A library is still resolved by name whatever it is called: the
suffixes only decide which files are scanned as starting points.

Reading headers is the only other per-file work, so it can be spread over a process pool
(`jobs`); the walk and the resolution stay in this process, which needs the whole picture. On
2 cores, starting the pool and shipping paths and results costs about what it saves below some
20,000 files to check (an image of 60,000 files has about 6,000 left after the suffix filter:
bench/scan), so smaller trees are read in-process.
"""

from __future__ import annotations

import errno
import multiprocessing
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from sglx.scan.elf import BAD_HEADERS, ELF_MAGIC, UNREADABLE, ElfInfo, FileProblem, inspect_elf
from sglx_core.rootfs import Kind, RootFS

# A file or folder that went away (or became a link) between listing and opening: not a problem.
_GONE = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ELOOP})
# Pseudo filesystems of a live system: never walked when they sit at the top of the root.
_SKIP_TOP = frozenset({"/proc", "/sys", "/dev"})
TEXT_SUFFIXES = frozenset(
    {
        *(".py", ".pyc", ".pyi", ".pyx", ".pxd", ".pxi"),
        *(".h", ".hh", ".hpp", ".cuh", ".c", ".cc", ".cpp", ".cu", ".inc"),
        *(".json", ".yaml", ".yml", ".toml", ".txt", ".md", ".rst", ".typed", ".cmake"),
        *(".html", ".css", ".js", ".xml", ".svg"),
    }
)


def names_only(name: str) -> bool:
    """Whether unpacking may keep a file as its name only: the walk never opens such a file."""
    dot = name.rfind(".")
    return dot > 0 and name[dot:] in TEXT_SUFFIXES


_CHUNK = 256
POOL_MIN_FILES = 20_000
_PROGRESS_EVERY_S = 2.0


@dataclass
class Inventory:
    """What a walk found: how many regular files, and the facts of each ELF file among them.

    Files the scan could not use are sorted by how bad that is: `damaged` (an ELF file cut
    short, a file or folder that cannot be read: findings, since what is in them goes
    unchecked and a process loading them fails too) and `unreadable` (ELF headers that cannot
    be read, such as separate debug-info files: listed only).
    """

    files: int = 0
    elves: dict[str, ElfInfo] = field(default_factory=dict)  # canonical path -> facts
    unreadable: dict[str, str] = field(default_factory=dict)  # canonical path -> why
    damaged: dict[str, FileProblem] = field(default_factory=dict)  # canonical path -> problem
    seconds_walk: float = 0.0
    seconds_read: float = 0.0


def take_inventory(
    rootfs: RootFS,
    subtrees: Sequence[str],
    *,
    jobs: int,
    progress: Callable[[str], None],
) -> Inventory:
    """Walk `subtrees` (virtual paths) without following links and read every ELF file."""
    inventory = Inventory()
    started = time.monotonic()
    paths, inventory.files, unlisted = _walk(rootfs, subtrees, progress)
    inventory.damaged.update(unlisted)
    inventory.seconds_walk = time.monotonic() - started
    progress(
        f"{inventory.files} files found in {inventory.seconds_walk:.1f} s; "
        f"checking {len(paths)} for ELF headers"
    )
    started = time.monotonic()
    hosts = [rootfs.host_path(p) for p in paths]
    for index, info, problem in _read_all(hosts, jobs, progress):
        if info is not None:  # usable, even if cut short past what the loader reads
            inventory.elves[paths[index]] = info
        if problem is None:
            continue
        if problem.kind == BAD_HEADERS:
            inventory.unreadable[paths[index]] = problem.reason
        else:
            inventory.damaged[paths[index]] = problem
    inventory.seconds_read = time.monotonic() - started
    return inventory


def _walk(
    rootfs: RootFS, subtrees: Sequence[str], progress: Callable[[str], None]
) -> tuple[list[str], int, dict[str, FileProblem]]:
    """Files to open (virtual paths), how many regular files there are in all, and the folders
    that could not be listed (their files go unchecked)."""
    paths: list[str] = []
    unlisted: dict[str, FileProblem] = {}
    skipped = 0
    seen: set[str] = set()
    last = time.monotonic()
    for subtree in subtrees:
        top = rootfs.resolve(subtree)
        if top is None or top in seen:
            continue
        seen.add(top)
        if rootfs.kind(top) is Kind.FILE:
            paths.append(top)
            continue
        stack = [top]
        while stack:
            directory = stack.pop()
            try:
                with os.scandir(rootfs.host_path(directory)) as it:
                    entries = list(it)
            except OSError as exc:
                if exc.errno not in _GONE:
                    reason = f"folder cannot be listed ({exc.strerror}): its files were not checked"
                    unlisted[directory] = FileProblem(UNREADABLE, reason)
                continue
            prefix = "" if directory == "/" else directory
            held = rootfs.placeholders_in(directory)
            if held:  # skipped like the text files they are (see names_only)
                skipped += len(held - {entry.name for entry in entries})
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    child = f"{prefix}/{entry.name}"
                    if child not in _SKIP_TOP:
                        stack.append(child)
                elif entry.is_file(follow_symlinks=False):
                    if names_only(entry.name):
                        skipped += 1
                    else:
                        paths.append(f"{prefix}/{entry.name}")
            if time.monotonic() - last > _PROGRESS_EVERY_S:
                last = time.monotonic()
                progress(f"walking: {len(paths) + skipped} files so far")
    return paths, len(paths) + skipped, unlisted


_Read = tuple[int, ElfInfo | None, FileProblem | None]


def _read_chunk(start: int, hosts: Sequence[str]) -> list[_Read]:
    """Read the ELF files among `hosts`; only ELF files and files that fail are returned.

    A file that cannot be opened or read may be an ELF file: nobody can tell, so it is a
    problem, not skipped.
    """
    out: list[_Read] = []
    for offset, path in enumerate(hosts):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno not in _GONE:
                problem = FileProblem(
                    UNREADABLE, f"cannot be opened ({exc.strerror}), so it was not checked"
                )
                out.append((start + offset, None, problem))
            continue
        try:
            magic = os.read(fd, 4)
        except OSError as exc:
            problem = FileProblem(
                UNREADABLE, f"cannot be read ({exc.strerror}), so it was not checked"
            )
            out.append((start + offset, None, problem))
            continue
        finally:
            os.close(fd)
        if magic == ELF_MAGIC:
            out.append((start + offset, *inspect_elf(path)))
    return out


def _read_all(hosts: list[str], jobs: int, progress: Callable[[str], None]) -> list[_Read]:
    if jobs <= 1 or len(hosts) < POOL_MIN_FILES:
        return _read_chunk(0, hosts)
    # A few chunks per worker: enough to balance, few enough to keep the pool's overhead low.
    size = max(_CHUNK, len(hosts) // (jobs * 4) + 1)
    chunks = [(i, hosts[i : i + size]) for i in range(0, len(hosts), size)]
    # fork: the workers need nothing but this module, and start in milliseconds.
    context = multiprocessing.get_context("fork")
    out: list[_Read] = []
    last = time.monotonic()
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        futures = [pool.submit(_read_chunk, start, chunk) for start, chunk in chunks]
        for done, future in enumerate(futures, 1):
            out.extend(future.result())
            if time.monotonic() - last > _PROGRESS_EVERY_S:
                last = time.monotonic()
                progress(f"reading ELF headers: {min(done * size, len(hosts))}/{len(hosts)} files")
    return out
