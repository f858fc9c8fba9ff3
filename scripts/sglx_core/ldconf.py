"""The directories `ldconfig` would put in the root's `/etc/ld.so.cache`, read from its config.

The loader looks a name up in `ld.so.cache`, which `ldconfig` builds from the directories in
`/etc/ld.so.conf` (and the files its `include` lines name). A scanned image may carry a stale
cache or none, so we read the config instead and search those directories in order, the way a
freshly built cache answers. As in the cache, only names that look like libraries (starting with
`lib` or `ld-` and containing `.so`) are found there.
"""

from __future__ import annotations

import posixpath
from pathlib import Path

from sglx_core.rootfs import Kind, RootFS

LD_SO_CONF = "/etc/ld.so.conf"
_MAX_INCLUDE_DEPTH = 16


def conf_dirs(rootfs: RootFS) -> tuple[str, ...]:
    """Directories from the root's `/etc/ld.so.conf`, includes expanded, first mention wins."""
    dirs: list[str] = []
    _parse(rootfs, LD_SO_CONF, dirs, set(), 0)
    return tuple(dict.fromkeys(dirs))


def cache_may_hold(name: str) -> bool:
    """Whether `ldconfig` puts a file of this name in the cache (its `search_dir` filter)."""
    return (name.startswith("lib") or name.startswith("ld-")) and ".so" in name


def _parse(rootfs: RootFS, path: str, dirs: list[str], seen: set[str], depth: int) -> None:
    canonical = rootfs.resolve(path)
    if canonical is None or canonical in seen or depth > _MAX_INCLUDE_DEPTH:
        return
    if rootfs.kind(canonical) is not Kind.FILE:
        return
    seen.add(canonical)
    try:
        text = Path(rootfs.host_path(canonical)).read_text(encoding="utf-8", errors="replace")
        lines = text.splitlines()
    except OSError:
        return
    for raw in lines:
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        word, *args = line.split()
        if word == "include":
            for pattern in args:
                if not pattern.startswith("/"):
                    pattern = posixpath.join(posixpath.dirname(path), pattern)
                for match in rootfs.glob(pattern):
                    _parse(rootfs, match, dirs, seen, depth + 1)
        elif word.lower() == "hwcap":
            continue  # legacy hwcap lines, ignored by current ldconfig
        else:
            directory = line.rstrip("/") or "/"
            if directory.startswith("/"):
                dirs.append(directory)
