"""Entry point of the `sglang.srt.plugins` group: the hooks sglx needs in each sglang process.

sglang's `load_plugins()` calls `register()` early in every process (server, scheduler,
detokenizer). Nothing happens unless an sglx profile is baked in and the sglx platform is the
active one, so installing sglx beside another platform plugin changes nothing there.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from sglx_platform import ops, profiling, vendor
from sglx_platform.consistency import check_ranks
from sglx_platform.device_init import init_device
from sglx_platform.image_profile import profile_path

logger = logging.getLogger(__name__)

PARALLEL_RUNTIME = "sglang.srt.distributed.bootstrap.init_parallel_runtime"
RESOLVE_FORWARD = "sglang.kernels.fused_op.BaseFusedOp._resolve_forward_method"


def register() -> None:
    if not profile_path().is_file():
        return
    from sglang.srt.platforms import current_platform
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    from sglx_platform.platforms.base import SglxPlatformMixin

    platform: Any = current_platform
    if not isinstance(platform, SglxPlatformMixin):
        return
    profile = platform.sglx_profile
    if profile.platform.vendor is not None:
        vendor.run_general_plugins(profile.platform.vendor)
    HookRegistry.register(PARALLEL_RUNTIME, _parallel_runtime, HookType.AROUND)
    ops.register(profile)
    if profile.kernels.serve and not platform.is_out_of_tree():
        HookRegistry.register(RESOLVE_FORWARD, ops.resolve_forward_hook, HookType.AROUND)
    if profiling.enabled():
        profiling.install()


def _parallel_runtime(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """AROUND sglang's per-rank parallel bring-up: robust device init first, rank check after."""
    from sglang.srt.platforms import current_platform
    from sglang.srt.runtime_context import get_device

    profile = current_platform.sglx_profile
    gpu_id = int(get_device().gpu_id or 0)
    device_type = profile.platform.device_type
    init_device(lambda: _touch(device_type, gpu_id), f"{profile.arch} device {gpu_id}")
    result = original(*args, **kwargs)
    check_ranks(profile, kwargs.get("server_args"))
    return result


def _touch(device_type: str, gpu_id: int) -> None:
    """The first real device operation: select it, allocate, compute, synchronise."""
    import torch

    if device_type == "cpu":
        torch.ones(1).add_(1)
        return
    torch.cuda.set_device(gpu_id)
    torch.ones(1, device=torch.device(device_type, gpu_id)).add_(1)
    torch.cuda.synchronize(gpu_id)
