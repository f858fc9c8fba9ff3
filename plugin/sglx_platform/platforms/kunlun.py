"""Kunlunxin P800 XPUs, which xpytorch (torch_xmlir) presents to torch as 'cuda' devices."""

from __future__ import annotations

import torch
from sglang.srt.platforms.cuda import CudaDeviceMixin
from sglang.srt.platforms.device_mixin import PlatformEnum
from sglang.srt.platforms.interface import SRTPlatform

from sglx_platform.platforms.base import SglxPlatformMixin


class SglxKunlunPlatform(SglxPlatformMixin, CudaDeviceMixin, SRTPlatform):
    """Out-of-tree: the XPU answers through torch.cuda, but none of CUDA's kernels run on it.

    Device operations are CUDA's (torch_xmlir rewrites torch.cuda onto the XPU runtime);
    capabilities stay off (no Triton, no graph capture, no pynccl: ncclCommInitRank aborts on
    Kunlun), and collectives use the 'nccl' backend name, which BKCL serves.
    """

    _enum = PlatformEnum.OOT
    device_name = "kunlun"

    def __init__(self) -> None:
        super().__init__()
        self._sglx_setup()

    def get_group_coordinator_device(self, local_rank: int) -> torch.device:
        """Bind each rank's group coordinator to its own card (the default would be CPU)."""
        return torch.device("cuda", local_rank)
