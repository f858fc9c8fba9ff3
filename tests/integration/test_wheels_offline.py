"""The cpu lock is exactly what pip's resolver makes of the cpu wheelhouse, offline.

The run's cpu wheelhouse (`sglx wheels fetch`, the chain's first step) holds the lock's wheels
and nothing else. Resolving the cpu profile's requirements from that folder alone (pip's own
PIP_NO_INDEX: only --find-links is read) must give the committed lock back, version and hash
for each wheel: a lock that missed a dependency, kept one nothing needs or named another
file's hash fails here, without a byte to or from an index. Whether the lock is still what the
index held at its recorded cutoff is a question for the index: `make lock-check` asks it,
where a network is (tests reach only 127.0.0.1).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from helpers.child_env import child_environment
from helpers.engine_fixtures import REPO, SGLX


def test_the_cpu_lock_is_what_the_resolver_makes_of_its_wheelhouse(cpu_wheelhouse: Path) -> None:
    done = subprocess.run(
        [SGLX, "wheels", "lock", "--arch", "cpu", "--check", "--find-links",
         str(cpu_wheelhouse), "-q"],
        capture_output=True, text=True, timeout=600, check=False, cwd=REPO,
        env=child_environment(PIP_NO_INDEX="1"),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "bundles/locks/cpu.txt: up to date" in done.stdout, done.stdout
