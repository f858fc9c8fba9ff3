"""The sglang-kunlun stand-in (tests/data/vendor/sglang-kunlun): on `sys.path` for the whole
test process, as the Kunlun base carries the real package, so resolving the Kunlun platform
subclasses it; and sglang's attention-backend choices restored after each test, since the
vendor's platform appends its own to sglang's module-level list."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

STAND_IN = Path(__file__).resolve().parents[1] / "data" / "vendor" / "sglang-kunlun"


def install() -> None:
    if str(STAND_IN) not in sys.path:
        sys.path.append(str(STAND_IN))
        importlib.invalidate_caches()


@contextmanager
def sglang_choices_kept() -> Iterator[None]:
    """ATTENTION_BACKEND_CHOICES as it was before, in place (argparse holds the same list)."""
    server_args = sys.modules.get("sglang.srt.server_args")
    before = list(server_args.ATTENTION_BACKEND_CHOICES) if server_args else None
    try:
        yield
    finally:
        if server_args is not None and before is not None:
            server_args.ATTENTION_BACKEND_CHOICES[:] = before
        elif "sglang.srt.server_args" in sys.modules:
            choices = sys.modules["sglang.srt.server_args"].ATTENTION_BACKEND_CHOICES
            choices[:] = [c for c in choices if not c.startswith("kunlun")]


@contextmanager
def uninstalled() -> Iterator[None]:
    """A process without sglang-kunlun: the stand-in off `sys.path` and out of `sys.modules`."""
    sys.path.remove(str(STAND_IN))
    dropped = {n: m for n, m in sys.modules.items() if n.split(".")[0] == "sglang_kunlun"}
    dropped.update({n: m for n, m in sys.modules.items() if n == "sglx_platform.platforms.kunlun"})
    for name in dropped:
        del sys.modules[name]
    importlib.invalidate_caches()
    try:
        yield
    finally:
        sys.path.append(str(STAND_IN))
        sys.modules.update(dropped)
        importlib.invalidate_caches()
