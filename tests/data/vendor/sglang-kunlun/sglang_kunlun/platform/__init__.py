"""Stand-in of the vendor's platform package: importing it runs the pre-shim, as the real one
does."""

from sglang_kunlun import _kunlun_pre_shim

_kunlun_pre_shim()

from .device import KunlunDeviceMixin  # noqa: E402
from .srt import KunlunSRTPlatform, activate  # noqa: E402

__all__ = ["KunlunDeviceMixin", "KunlunSRTPlatform", "activate"]
