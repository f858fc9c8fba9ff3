"""A default core binding for multi-rank serving on the cpu platform.

sglang on cpu binds each rank's OpenMP threads to one NUMA node unless
SGLANG_CPU_OMP_THREADS_BIND lists the cores of every rank ('0-3|4-7'); with more ranks than NUMA
nodes (a 2-core machine has one) it stops (sglang srt/utils/numa_utils.py). Where the profile
asks for it (`ranks.bind_cpu_cores`) and the variable is unset, the server's main process sets
it before the schedulers start (they inherit it): this process's cores split evenly among the
node's local ranks, so `--tp 2` works without the user knowing the variable.
"""

from __future__ import annotations

import logging
import os
from collections.abc import MutableMapping
from typing import Any

from sglx_core.profile.schema import Ranks

logger = logging.getLogger(__name__)
VARIABLE = "SGLANG_CPU_OMP_THREADS_BIND"


def local_ranks(server_args: Any) -> int:
    """Rank processes this node starts: tensor x pipeline x data replicas, over the nodes.
    Attention DP partitions the TP group instead of adding processes."""
    tp = int(getattr(server_args, "tp_size", 1) or 1)
    pp = int(getattr(server_args, "pp_size", 1) or 1)
    dp = int(getattr(server_args, "dp_size", 1) or 1)
    if getattr(server_args, "enable_dp_attention", False):
        dp = 1
    nnodes = max(int(getattr(server_args, "nnodes", 1) or 1), 1)
    return max(tp * pp * dp // nnodes, 1)


def _span(cores: list[int]) -> str:
    if cores == list(range(cores[0], cores[-1] + 1)):
        return str(cores[0]) if len(cores) == 1 else f"{cores[0]}-{cores[-1]}"
    return ",".join(str(c) for c in cores)


def split_cores(cores: list[int], parts: int) -> str:
    """'0|1' for two cores and two ranks; fewer cores than ranks share them round-robin."""
    cores = sorted(cores)
    if len(cores) < parts:
        return "|".join(str(cores[i % len(cores)]) for i in range(parts))
    size, extra = divmod(len(cores), parts)
    groups, start = [], 0
    for index in range(parts):
        end = start + size + (1 if index < extra else 0)
        groups.append(_span(cores[start:end]))
        start = end
    return "|".join(groups)


def apply_default(
    ranks: Ranks, server_args: Any, environ: MutableMapping[str, str] | None = None
) -> str | None:
    """Set the variable when the profile asks and the user did not; the value set, or None."""
    environ = os.environ if environ is None else environ
    parts = local_ranks(server_args)
    if not ranks.bind_cpu_cores or VARIABLE in environ or parts < 2:
        return None
    value = split_cores(sorted(os.sched_getaffinity(0)), parts)
    environ[VARIABLE] = value
    logger.info(
        "sglx: %s=%s (%d local ranks; set it to bind cores yourself)", VARIABLE, value, parts
    )
    return value
