"""Resolve an sglx platform the way sglang does, and run its hook on sglang's real ServerArgs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from helpers.devices import make_kfd_host, make_kunlun_host
from helpers.profiles import bake

# A KFD target version per AMD arch: the host each arch's platform activates on.
KFD_VERSIONS = {"gfx942": [90402], "gfx950": [90500], "gfx1151": [110501]}


def platform_for(arch: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """`arch`'s profile baked, its devices on a probe root, SGLANG_PLATFORM=sglx: the platform
    sglang's discovery resolves (`current_platform` on first access)."""
    root = tmp_path / f"host-{arch}"
    baked = tmp_path / arch / "arch.yaml"
    if not root.exists():
        root.mkdir()
        if arch in KFD_VERSIONS:
            make_kfd_host(root, KFD_VERSIONS[arch])
        elif arch == "kunlun":
            make_kunlun_host(root, cards=1)
    if not baked.exists():
        bake(arch, baked)
    monkeypatch.setenv("SGLX_PROBE_ROOT", str(root))
    monkeypatch.setenv("SGLX_PROFILE", str(baked))
    monkeypatch.setenv("SGLANG_PLATFORM", "sglx")
    from sglang.srt.platforms import _resolve_platform

    return _resolve_platform()


def apply(
    arch: str, argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: Path
) -> Any:
    """Parse `argv` with sglang's parser and run the platform hook exactly the way sglang's
    resolution pipeline does (`record_foreign_defaults`, after snapshotting the raw input);
    the resolved view of the fields."""
    from sglang.srt.arg_groups.arg_utils import record_fields
    from sglang.srt.arg_groups.overrides import record_foreign_defaults, resolving_view
    from sglang.srt.server_args import prepare_server_args

    platform = platform_for(arch, tmp_path, monkeypatch)
    args = prepare_server_args(["--model-path", str(model), *argv])
    args._raw_input = {f.name: getattr(args, f.name) for f in record_fields(type(args))}
    record_foreign_defaults(args, f"platform:{arch}", platform.apply_server_args_defaults)
    return resolving_view(args)
