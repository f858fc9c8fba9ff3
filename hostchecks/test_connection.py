"""The check every other one stands on: commands run on the host over its connection (as root
with --sudo). It runs in both modes; when it fails, the host's other checks are skipped
(conftest.py), so an unreachable host is one finding in words, not one SSH error per check.
"""

from __future__ import annotations

from typing import Any

import pytest
from probes import connection_problem, problem

pytestmark = pytest.mark.preflight


def test_connection(host: Any) -> None:
    """The host answers over the connection its inventory names and runs a command."""
    trouble = connection_problem(host)
    if trouble is not None:
        problem(*trouble)
