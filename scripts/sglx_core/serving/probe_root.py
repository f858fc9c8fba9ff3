"""The probe root: sysfs, /proc and /dev as this host (or a fixture tree) shows them, under
$SGLX_PROBE_ROOT (default /). Every path read through `ProbeRoot` is resolved and must stay
inside the root, and every read and listing is bounded (sglx_core.untrusted), so a damaged or
hostile tree is refused naming the file, never followed out of the root."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from sglx_core.errors import SglxError
from sglx_core.untrusted import read_bounded

PROBE_ROOT_ENV = "SGLX_PROBE_ROOT"


def probe_root() -> Path:
    return Path(os.environ.get(PROBE_ROOT_ENV) or "/")


class ProbeRoot:
    """The probe root: every path is resolved and must stay inside it."""

    def __init__(self, root: Path) -> None:
        self.shown = root
        self.real = Path(os.path.realpath(root))

    def path(self, relative: str) -> Path:
        return self.shown / relative

    def inside(self, path: Path, what: str) -> Path:
        """`path` with its links resolved, refused when they lead out of the root."""
        real = Path(os.path.realpath(path))
        if real != self.real and self.real not in real.parents:
            raise SglxError(
                f"{path}: the {what} is a link to {real}, outside the probe root {self.shown}",
                hint="a real sysfs keeps its links inside /sys; repair the tree or point "
                f"{PROBE_ROOT_ENV} at a complete copy",
                code="corrupt",
                path=str(path),
            )
        return real

    def read(self, path: Path, what: str, max_bytes: int, hint: str) -> bytes:
        """The file's bytes, bounded. sysfs fails in read(), not open() (the kernel's show()
        runs then), so read errors are caught here too: EPERM/EACCES as code "permission"."""
        real = self.inside(path, what)
        try:
            return read_bounded(real, what=what, max_bytes=max_bytes, hint=hint)
        except OSError as exc:
            denied = exc.errno in (errno.EPERM, errno.EACCES)
            raise SglxError(
                f"{path}: cannot read the {what}: {exc.strerror}",
                hint=hint,
                code="permission" if denied else "environment",
                path=str(path),
            ) from None

    def listdir(self, path: Path, what: str, limit: int, hint: str) -> list[str]:
        """Names in the folder `path` (links resolved inside the root), at most `limit`."""
        real = self.inside(path, what)
        names: list[str] = []
        try:
            with os.scandir(real) as entries:
                for entry in entries:
                    names.append(entry.name)
                    if len(names) > limit:
                        raise SglxError(
                            f"{path}: the {what} holds more than {limit} entries; no real one does",
                            hint=hint,
                            code="corrupt",
                            path=str(path),
                        )
        except OSError as exc:
            raise SglxError(
                f"{path}: cannot list the {what}: {exc.strerror}",
                hint=hint,
                code="environment",
                path=str(path),
            ) from None
        return sorted(names, key=_natural)


def _natural(name: str) -> tuple[int, str]:
    return (int(name), "") if name.isdigit() else (1 << 62, name)
