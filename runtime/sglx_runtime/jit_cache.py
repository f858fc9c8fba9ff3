"""The node-local JIT cache folder, refused at start unless it belongs to the server alone.

The profile points Triton's, AITER's and the other JIT caches under `container.jit_cache.target`
(TRITON_CACHE_DIR, AITER_JIT_DIR, AITER_ROOT_DIR), where every `docker run` sglx writes mounts
one host folder per image id (sglx_core.jit_cache). What the JIT compilers find there is code
the server loads and runs: a compiled kernel, a built extension module. So anybody who can
write into the folder, or swap it for a link, can run code inside the server. `sglx-serve`
therefore checks the folder before it starts anything (exit 2 when it fails): a real folder,
not a link, owned by the server's uid, mode exactly 0700. The message names the folder on the
host (the run spec sets SGLX_JIT_CACHE_HOST to it; the container path when it is unset) and
the fix.

Code that seeds the cache (e.g. copying a prebuilt Triton cache in at start) calls
`checked_cache_root()` first and writes only under the path it returns.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from sglx_core.errors import SglxError
from sglx_core.jit_cache import HOST_ENV, MODE
from sglx_platform.image_profile import baked_profile


def cache_root() -> Path:
    """The folder in the container (the baked profile's container.jit_cache.target)."""
    return Path(baked_profile().container.jit_cache.target)


def problem(root: Path, uid: int) -> str | None:
    """Why `root` is no private cache folder of the process with `uid`; None when it is."""
    try:
        info = os.lstat(root)
    except FileNotFoundError:
        return "does not exist"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if stat.S_ISLNK(info.st_mode):
        return "is a symbolic link, not a folder"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a folder"
    found = []
    if info.st_uid != uid:
        found.append(f"is owned by uid {info.st_uid}, not the server's uid {uid}")
    mode = stat.S_IMODE(info.st_mode)
    if mode != MODE:
        found.append(f"has mode {mode:04o}, not {MODE:04o}")
    return " and ".join(found) or None


def checked_cache_root() -> Path:
    """The JIT cache folder, once it is a folder of this process's uid with mode 0700; an
    SglxError naming the host folder and the fix otherwise (sglx-serve exits 2 with it)."""
    root = cache_root()
    uid, gid = os.geteuid(), os.getegid()
    why = problem(root, uid)
    if why is None:
        return root
    host = os.environ.get(HOST_ENV) or str(root)
    where = f"{host} (mounted at {root})" if host != str(root) else str(root)
    fix = f"chown {uid}:{gid} {host} && chmod {MODE:04o} {host}"
    if why == "does not exist":
        fix = f"mkdir -p {host} && {fix}"
    elif "not a folder" in why:
        fix = f"rm {host} && mkdir {host} && {fix}"
    raise SglxError(
        f"the JIT cache folder {where} {why}: the server loads code from it, so it must be "
        f"the server's alone (owned by uid {uid}, mode {MODE:04o})",
        hint=f"on the host: {fix} (the sglx roles, install.sh and `sglx bundle install` "
        "create it so)",
        code="jit_cache_unsafe",
        path=host,
    )
