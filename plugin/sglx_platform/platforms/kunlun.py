"""Kunlunxin P800 XPUs on sglang-kunlun's own platform, which sglx extends."""

from __future__ import annotations

from sglang_kunlun.platform.srt import KunlunSRTPlatform

from sglx_platform.platforms.base import SglxPlatformMixin


class SglxKunlunPlatform(SglxPlatformMixin, KunlunSRTPlatform):
    """A subclass of sglang-kunlun's platform (baidu-baige/sglang-kunlun,
    sglang_kunlun/platform/srt.py), which the base image carries (profile: platform.vendor).

    The vendor's class owns the device: xpytorch presents the XPU as 'cuda', and its platform
    gives the Kunlun KV pools, paged allocator, the 'kunlun' attention backends it adds to
    sglang's choices, and the compressed-tensors config; its __init__ runs the vendor's
    pre-shim. sglx adds only what the profile says: capabilities off (no Triton, no graph
    capture, no pynccl: ncclCommInitRank aborts on Kunlun), server-argument defaults and
    refusals. The vendor's general plugin (its hooks) is run by sglx's own (hooks.py).
    """

    def __init__(self) -> None:
        super().__init__()
        self._sglx_setup()
