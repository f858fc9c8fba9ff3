"""sglx's platforms stand on the platform each vendor wrote, never beside it.

Kunlun: sglx's platform subclasses sglang-kunlun's (the stand-in in tests/data/vendor keeps its
distribution, entry points, module layout and answers), so the vendor's attention backends, KV
pools and allocator are the ones selected, and sglx's general plugin runs the vendor's, which
sglang skips while SGLANG_PLATFORM selects sglx. ROCm: sglx's platform subclasses sglang's
in-tree one; every answer it changes is one sglang asks only of out-of-tree platforms.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import pytest
from helpers import kunlun_vendor
from helpers.platforms import KFD_VERSIONS, apply, platform_for
from helpers.profiles import bake

from sglx_core.profile import load_profile
from sglx_platform.activate import activate
from sglx_platform.failures import FailureClass, PlatformError
from sglx_runtime.preflight.checks import Check
from sglx_runtime.preflight.profile_checks import check_vendor

# The questions a platform answers (no device work): method -> the argument lists asked.
QUANTIZATIONS = ("fp8", "compressed-tensors", "w8a8_int8", "awq", "gptq", "modelopt_fp4")
SPECULATIVE = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH")
QUESTIONS: dict[str, list[tuple[tuple[Any, ...], dict[str, Any]]]] = {
    "get_kv_pool_cls": [((), {"kind": kind}) for kind in ("mha", "mla", "dsa")],
    "get_quantization_config": [((q,), {}) for q in QUANTIZATIONS],
    "supports_speculative_algorithm": [((a,), {}) for a in SPECULATIVE],
    "get_speculative_worker_cls": [((a,), {}) for a in SPECULATIVE],
    "get_group_coordinator_device": [((0,), {}), ((1,), {})],
    "get_compile_backend": [((), {}), ((None,), {})],
}
# Device operations and lifecycle calls: not questions. sglx must not override them at all.
DEVICE_WORK = {
    "empty_cache", "synchronize", "set_device", "seed_everything", "post_load_model",
    "init_backend", "reindex_device_id", "inference_mode", "get_available_memory",
    "get_current_memory_usage", "get_device_capability", "get_device_name",
    "get_device_total_memory", "get_device_uuid", "get_device", "is_pin_memory_available",
    "get_cpu_architecture", "cpu_arch",
}  # fmt: skip
# What sglx changes on purpose, and why.
SGLX_HOOK = "apply_server_args_defaults"  # the platform's own first, then the profile's
DECLARED = {
    "capabilities": "the profile's platform.capabilities (compared below)",
    "get_default_attention_backend": "the profile's server.defaults.attention_backend",
    "supports_speculative_algorithm": "the profile's server.speculative_decoding",
    "get_dispatch_key_name": "the profile's platform.dispatch_key (sglx's own fused ops)",
    "get_torch_distributed_backend_str": "the profile's platform.distributed_backend",
    "get_torch_profiler_activity_str": "the profile's platform.profiler_activity",
    "get_torch_profiler_activity": "the profile's platform.profiler_activity",
}
# What sglx answers where the platform under it raises (sglang 0.5.23's DeviceMixin): asking
# it stopped the server at /start_profile.
ANSWERED_BY_SGLX = {"get_torch_profiler_activity_str", "get_torch_profiler_activity"}


def interface_names() -> list[str]:
    from sglang.srt.platforms.interface import SRTPlatform

    return [n for n in dir(SRTPlatform) if not n.startswith("_")]


def overridden(sglx_cls: type, base_cls: type) -> list[str]:
    """Interface names whose attribute on the sglx class is not the one it inherits."""
    return [
        name
        for name in interface_names()
        if inspect.getattr_static(sglx_cls, name, None)
        is not inspect.getattr_static(base_cls, name, None)
    ]


def answer(platform: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        value = getattr(platform, name)
        return value(*args, **kwargs) if callable(value) else value
    except Exception as exc:  # the same refusal counts as the same answer
        return ("raises", type(exc).__name__)


def answers(platform: Any, name: str) -> list[Any]:
    return [answer(platform, name, a, k) for a, k in QUESTIONS.get(name, [((), {})])]


def guarded_calls(name: str) -> list[str]:
    """Every call of `current_platform.<name>(` in sglang's srt package that is NOT inside an
    `is_out_of_tree()` branch (within the six lines before it)."""
    import sglang.srt.server_args

    root = Path(sglang.srt.server_args.__file__).parent
    unguarded = []
    for path in root.rglob("*.py"):
        if path.parent.name == "platforms":
            continue
        lines = path.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines):
            if re.search(rf"\.{name}\(", line):
                before = "\n".join(lines[max(0, number - 6) : number + 1])
                if "is_out_of_tree()" not in before:
                    unguarded.append(f"{path.relative_to(root)}:{number + 1}: {line.strip()}")
    return unguarded


# ------------------------------------------------------------------
# Kunlun: sglang-kunlun's platform, extended
# ------------------------------------------------------------------


def test_the_kunlun_platform_is_sglang_kunluns_with_its_pools_allocator_and_backends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sglang.srt.server_args import ATTENTION_BACKEND_CHOICES
    from sglang_kunlun.bootstrap import SHIM_RUNS
    from sglang_kunlun.hooks.layers.quantization.compressed_tensors import (
        KunlunCompressedTensorsConfig,
    )
    from sglang_kunlun.hooks.mem_cache.kunlun_allocator import KunlunPagedTokenToKVPoolAllocator
    from sglang_kunlun.hooks.mem_cache.kunlun_pools import (
        KunlunMHATokenToKVPool,
        KunlunMLATokenToKVPool,
    )
    from sglang_kunlun.platform.srt import KunlunSRTPlatform

    shims = len(SHIM_RUNS)
    platform = platform_for("kunlun", tmp_path, monkeypatch)
    assert isinstance(platform, KunlunSRTPlatform), type(platform).__mro__
    assert type(platform).__name__ == "SglxKunlunPlatform"
    assert len(SHIM_RUNS) > shims  # the vendor's __init__ ran its pre-shim
    assert platform.get_kv_pool_cls(kind="mha") is KunlunMHATokenToKVPool
    assert platform.get_kv_pool_cls(kind="mla") is KunlunMLATokenToKVPool
    assert platform.get_paged_allocator_cls() is KunlunPagedTokenToKVPoolAllocator
    assert platform.get_quantization_config("compressed-tensors") is KunlunCompressedTensorsConfig
    assert platform.get_default_attention_backend() == "kunlun"
    assert {"kunlun", "kunlun_compressed"} <= set(ATTENTION_BACKEND_CHOICES)
    assert platform.is_out_of_tree() and platform.device_type == "cuda"


def test_sglang_parses_the_vendors_backend_and_keeps_its_page_size_under_the_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--attention-backend kunlun` parses with sglang's real parser once the vendor's platform
    is resolved, and the vendor's default (page size 128) survives the profile's hook, which
    writes its own defaults after it."""
    from sglx.demo_model import make_demo_model

    model = make_demo_model(tmp_path / "demo")
    view = apply("kunlun", ["--attention-backend", "kunlun"], tmp_path, monkeypatch, model)
    assert view.attention_backend == "kunlun"
    assert view.page_size == 128
    assert view.disable_cuda_graph is True  # the profile's own default, written after


def test_sglx_runs_the_vendors_general_plugin_that_sglang_skips(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sglang.srt.plugins import _get_excluded_dists
    from sglang_kunlun.hooks.registry import REGISTERED

    from sglx_platform import hooks

    platform = platform_for("kunlun", tmp_path, monkeypatch)
    assert "sglang-kunlun" in _get_excluded_dists()  # sglang skips it under SGLANG_PLATFORM=sglx
    monkeypatch.setattr("sglang.srt.platforms._current_platform", platform)
    ran = len(REGISTERED)
    hooks.register()
    assert REGISTERED[ran:] == ["kunlun_hooks"]


def test_without_sglang_kunlun_activation_names_the_missing_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from helpers.devices import make_kunlun_host

    root = tmp_path / "host"
    root.mkdir()
    make_kunlun_host(root, cards=1)
    monkeypatch.setenv("SGLX_PROBE_ROOT", str(root))
    monkeypatch.setenv("SGLX_PROFILE", str(bake("kunlun", tmp_path / "arch.yaml")))
    monkeypatch.setenv("SGLANG_PLATFORM", "sglx")
    with kunlun_vendor.uninstalled(), pytest.raises(PlatformError) as caught:
        activate()
    assert caught.value.failure is FailureClass.PLUGIN_NOT_FOUND
    assert "stands on sglang-kunlun's, but the vendor platform package sglang-kunlun is not " \
        "installed" in caught.value.detail  # fmt: skip
    assert "base that carries sglang-kunlun" in caught.value.fix


def test_preflight_names_the_vendor_platform_and_the_plugins_sglx_runs(repo: Path) -> None:
    profile = load_profile("kunlun")
    checks: list[Check] = []
    check_vendor(profile, checks)
    (found,) = checks
    assert found.status == "pass", found
    assert "kunlun_hooks = sglang_kunlun.hooks.registry:register_all" in found.detail
    with kunlun_vendor.uninstalled():
        checks = []
        check_vendor(profile, checks)
    (found,) = checks
    assert found.status == "fail" and "sglang-kunlun is not installed" in found.detail


def test_sglx_changes_only_declared_answers_of_the_vendors_platform(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sglang_kunlun.platform.srt import KunlunSRTPlatform

    platform = platform_for("kunlun", tmp_path, monkeypatch)
    vendor = KunlunSRTPlatform()
    changed = overridden(type(platform), KunlunSRTPlatform)
    assert not set(changed) & DEVICE_WORK, changed
    assert set(changed) <= {*DECLARED, SGLX_HOOK}, changed
    # Declared, and today the same answers: the Kunlun profile agrees with the vendor.
    for name in changed:
        if name in ANSWERED_BY_SGLX:
            assert answers(vendor, name) == [("raises", "NotImplementedError")], name
            assert answers(platform, name) != answers(vendor, name), name
        elif name != SGLX_HOOK:
            assert answers(platform, name) == answers(vendor, name), name


# ------------------------------------------------------------------
# ROCm: sglang's in-tree platform, extended
# ------------------------------------------------------------------


@pytest.mark.parametrize("arch", tuple(KFD_VERSIONS))
def test_the_rocm_platform_answers_as_sglangs_in_tree_one(
    arch: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a ROCm stand-in (a KFD host of the arch's target), every question sglang asks an
    in-tree platform gets the in-tree ROCm platform's answer; sglx's own answers are asked
    only of out-of-tree platforms, which sglang's source shows."""
    from sglang.srt.platforms.rocm import RocmSRTPlatform

    platform = platform_for(arch, tmp_path, monkeypatch)
    in_tree = RocmSRTPlatform()
    assert isinstance(platform, RocmSRTPlatform) and not platform.is_out_of_tree()
    assert platform.capabilities == in_tree.capabilities
    assert guarded_calls("get_kv_pool_cls")  # the scan sees sglang's unguarded calls
    changed = overridden(type(platform), RocmSRTPlatform)
    assert not set(changed) & DEVICE_WORK, changed
    assert set(changed) <= {*DECLARED, SGLX_HOOK}, changed
    for name in interface_names():
        if name in DEVICE_WORK or name == SGLX_HOOK or name == "capabilities":
            continue
        if name in changed and answers(platform, name) != answers(in_tree, name):
            assert guarded_calls(name) == [], (name, DECLARED[name])
        else:
            assert answers(platform, name) == answers(in_tree, name), name
