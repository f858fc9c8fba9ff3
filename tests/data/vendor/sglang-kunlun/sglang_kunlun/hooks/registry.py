"""Stand-in of the vendor's general plugin: the real one imports its hook modules so their
decorators register with sglang's HookRegistry; this one records that it ran."""

REGISTERED: list[str] = []


def register_all() -> None:
    from sglang_kunlun.bootstrap import _kunlun_pre_shim

    _kunlun_pre_shim()
    REGISTERED.append("kunlun_hooks")
