"""The cpu reference platform: SGLang on native torch paths on any x86-64 machine."""

from __future__ import annotations

import torch
from sglang.srt.platforms.cpu import CpuDeviceMixin
from sglang.srt.platforms.device_mixin import PlatformEnum
from sglang.srt.platforms.interface import SRTPlatform

from sglx_platform.platforms.base import SglxPlatformMixin


class SglxCpuPlatform(SglxPlatformMixin, CpuDeviceMixin, SRTPlatform):
    """Out-of-tree on purpose (`_enum = OOT`).

    sglang's in-tree CPU platform (SGLANG_USE_CPU_ENGINE=1) imports sgl_kernel's CPU ops at
    module level, and PyPI's sglang-kernel is CUDA-only. As an out-of-tree platform with every
    capability off, sglang routes RoPE, the KV allocator and sampling to native torch paths,
    and the memory hooks of CpuDeviceMixin size the KV cache from host RAM -- which is why the
    profile bounds it (max_total_tokens, mem_fraction_static).
    """

    _enum = PlatformEnum.OOT

    def __init__(self) -> None:
        super().__init__()
        self._sglx_setup()

    def get_device(self, device_id: int | None = 0) -> str:
        """sglang fills --device from this (utils.get_device) and splits it as a string, which
        the interface declares; CpuDeviceMixin returns a torch.device."""
        return "cpu"

    def is_pin_memory_available(self, device: object = None) -> bool:
        """No accelerator to pin host memory for."""
        return False

    def get_group_coordinator_device(self, local_rank: int) -> torch.device:
        """Every rank's collectives run on the CPU (gloo)."""
        return torch.device("cpu")
