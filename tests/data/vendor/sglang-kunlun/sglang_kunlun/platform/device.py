"""Stand-in of the vendor's device identity: out-of-tree, 'kunlun', presented as 'cuda'."""

from sglang.srt.platforms.device_mixin import DeviceMixin, PlatformEnum


class KunlunDeviceMixin(DeviceMixin):
    _enum = PlatformEnum.OOT
    device_name = "kunlun"
    device_type = "cuda"

    def get_dispatch_key_name(self) -> str:
        return "cuda"
