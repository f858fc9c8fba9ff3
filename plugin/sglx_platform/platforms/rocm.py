"""AMD Instinct and Radeon (gfx942, gfx950, gfx1151) on sglang's in-tree ROCm platform."""

from __future__ import annotations

from sglang.srt.platforms.rocm import RocmSRTPlatform

from sglx_platform.platforms.base import SglxPlatformMixin


class SglxRocmPlatform(SglxPlatformMixin, RocmSRTPlatform):
    """A subclass of the in-tree ROCm platform that keeps `_enum = ROCM`.

    sglang's HIP code paths (AITER, FP8 types, defaults) key on torch.version.hip, not on the
    platform object, and an out-of-tree enum would also have to re-provide the graph runner,
    KV pools and speculative hooks. So sglx changes only what the profile says: server-argument
    defaults and refusals (e.g. triton attention and no FP8 KV cache on gfx1151).
    """

    def __init__(self) -> None:
        super().__init__()
        self._sglx_setup()
