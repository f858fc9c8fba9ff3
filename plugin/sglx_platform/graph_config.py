"""The profile's graph switches, carried into the CUDA-graph config sglang already resolved.

sglang 0.5.23 resolves `cuda_graph_config` (one capture backend per phase: decode, prefill)
from the graph flags in `handle_cuda_graph_config`, before the platform hook runs
(wheel:srt/arg_groups/pipeline.py: handle_cuda_graph_config, then handle_platform_defaults).
A switch the profile writes in the hook, such as Kunlun's `disable_cuda_graph: true`, would
change the flag and not what the graph runners read: decode stayed eager only through the
platform's capabilities, and prefill capture was not gated at all. So each switch the profile
writes also turns its phases off in the resolved config, as sglang's own parse_cuda_graph_config
maps the flags (wheel:srt/arg_groups/cuda_graph_hook.py), except a phase whose capture the user
chose with a per-phase flag or a JSON config, which sglang ranks above the switches.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

# The switch -> the phases it turns off (parse_cuda_graph_config's mapping).
SWITCHES: dict[str, tuple[str, ...]] = {
    "disable_cuda_graph": ("decode", "prefill"),
    "disable_decode_cuda_graph": ("decode",),
    "disable_prefill_cuda_graph": ("prefill",),
}
# sglang's Backend.DISABLED (srt/model_executor/cuda_graph_config.py).
DISABLED = "disabled"


def phases_turned_off(writes: Mapping[str, Any], asked: Mapping[str, Any]) -> tuple[str, ...]:
    """The phases the profile's `writes` turn off, less those the user set a capture for."""
    phases = {phase for name, off in SWITCHES.items() if writes.get(name) is True for phase in off}
    if asked.get("cuda_graph_config"):
        return ()
    chosen = {phase for phase in phases if asked.get(f"cuda_graph_backend_{phase}") is not None}
    return tuple(sorted(phases - chosen))


def with_phases_off(config: Any, phases: tuple[str, ...]) -> Any:
    """A copy of sglang's resolved CudaGraphConfig with `phases` captured by no graph."""
    turned = copy.deepcopy(config)
    for phase in phases:
        getattr(turned, phase).backend = DISABLED
    return turned
