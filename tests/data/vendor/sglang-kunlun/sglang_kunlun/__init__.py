"""Stand-in of sglang-kunlun's package root: it re-exports the pre-shim, as the real one does."""

from sglang_kunlun.bootstrap import _kunlun_pre_shim

__all__ = ["_kunlun_pre_shim"]
