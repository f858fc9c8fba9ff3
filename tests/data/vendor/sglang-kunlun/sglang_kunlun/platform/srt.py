"""Stand-in of the vendor's KunlunSRTPlatform: the same answers, no device behind them."""

from __future__ import annotations

from sglang.srt.platforms.interface import SRTPlatform

from .device import KunlunDeviceMixin

KUNLUN_BACKENDS = ("kunlun", "kunlun_compressed")


class KunlunSRTPlatform(KunlunDeviceMixin, SRTPlatform):
    supported_quantization = ["w8a8_int8", "compressed-tensors"]  # noqa: RUF012 (as the vendor)

    def __init__(self) -> None:
        super().__init__()
        from sglang_kunlun.bootstrap import _kunlun_pre_shim

        _kunlun_pre_shim()
        import sglang.srt.server_args as server_args

        for backend in KUNLUN_BACKENDS:
            if backend not in server_args.ATTENTION_BACKEND_CHOICES:
                server_args.ATTENTION_BACKEND_CHOICES.append(backend)

    def get_quantization_config(self, quantization: str):
        if quantization == "compressed-tensors":
            from sglang_kunlun.hooks.layers.quantization.compressed_tensors import (
                KunlunCompressedTensorsConfig,
            )

            return KunlunCompressedTensorsConfig
        return None

    def apply_server_args_defaults(self, server_args) -> None:
        if getattr(server_args, "page_size", None) is None:
            server_args.page_size = 128

    def get_default_attention_backend(self) -> str:
        return "kunlun"

    def get_mha_kv_pool_cls(self) -> type:
        from sglang_kunlun.hooks.mem_cache.kunlun_pools import KunlunMHATokenToKVPool

        return KunlunMHATokenToKVPool

    def get_mla_kv_pool_cls(self) -> type:
        from sglang_kunlun.hooks.mem_cache.kunlun_pools import KunlunMLATokenToKVPool

        return KunlunMLATokenToKVPool

    def get_paged_allocator_cls(self) -> type:
        from sglang_kunlun.hooks.mem_cache.kunlun_allocator import (
            KunlunPagedTokenToKVPoolAllocator,
        )

        return KunlunPagedTokenToKVPoolAllocator


def activate() -> str | None:
    try:
        import torch_xmlir  # noqa: F401
    except Exception:
        return None
    return "sglang_kunlun.platform:KunlunSRTPlatform"
