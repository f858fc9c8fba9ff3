"""The one environment every child the suite's helpers start runs with, fixed when the session
starts.

Tests patch os.environ (`monkeypatch.setenv("SGLX_IMAGES_DIR", ...)`), and the environment is
process-wide: a child started from the cpu chain's thread, or from the e2e's background bundle,
while a unit test held such a patch ran against that test's copy of the profiles (it looked
for the Ansible content under the test's temp folder and failed). So helpers never hand a
child the live os.environ: they hand it this fixed copy, taken before any test ran.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import MappingProxyType

import pytest

_fixed: MappingProxyType[str, str] | None = None


def freeze(config: pytest.Config) -> None:
    """Take the copy (from pytest_sessionstart, before any test). Per-user caches go to a
    folder of the run, never the real ~/.cache/sglx, and so do the JIT cache folders install.sh
    and `sglx bundle install` create, never /var/cache/sglx/jit, as the tests' own (conftest.py)."""
    global _fixed
    base = Path(config._tmp_path_factory.getbasetemp())  # type: ignore[attr-defined]
    _fixed = MappingProxyType(
        {
            **os.environ,
            "SGLX_CACHE_DIR": str(base / "sglx-cache"),
            "SGLX_JIT_ROOT": str(base / "sglx-jit"),
        }
    )


def freeze_as(environment: dict[str, str]) -> None:
    """Take `environment` as the copy: for a script outside pytest that uses the helpers
    (bench/bundle/bench_rollout.py), which patches nothing."""
    global _fixed
    _fixed = MappingProxyType(dict(environment))


def child_environment(**extra: str) -> dict[str, str]:
    """The fixed environment, plus `extra`."""
    if _fixed is None:
        raise RuntimeError("child_env.freeze() was not called: tests/conftest.py calls it")
    return {**_fixed, **extra}
