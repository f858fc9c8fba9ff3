"""sglang's own platform discovery finds and activates the sglx platforms."""

from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path

import pytest
from helpers.devices import make_kfd_host, make_kunlun_host
from helpers.profiles import bake

from sglx_platform.activate import activate
from sglx_platform.failures import FailureClass, PlatformError


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty probe root (no accelerator) and no SGLANG_PLATFORM."""
    root = tmp_path / "host"
    root.mkdir()
    monkeypatch.setenv("SGLX_PROBE_ROOT", str(root))
    monkeypatch.delenv("SGLANG_PLATFORM", raising=False)
    return root


def use_profile(arch: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = bake(arch, tmp_path / "etc" / "arch.yaml")
    monkeypatch.setenv("SGLX_PROFILE", str(path))
    return path


def resolve() -> object:
    """sglang's discovery, exactly as `current_platform` runs it on first access."""
    from sglang.srt.platforms import _resolve_platform

    return _resolve_platform()


def test_sglx_registers_a_platform_and_a_general_plugin() -> None:
    platforms = {ep.name: ep.value for ep in entry_points(group="sglang.srt.platforms")}
    plugins = {ep.name: ep.value for ep in entry_points(group="sglang.srt.plugins")}
    assert platforms["sglx"] == "sglx_platform.activate:activate"
    assert plugins["sglx"] == "sglx_platform.hooks:register"


def test_sglang_platform_sglx_selects_the_cpu_platform(
    host: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_profile("cpu", tmp_path, monkeypatch)
    monkeypatch.setenv("SGLANG_PLATFORM", "sglx")
    platform = resolve()
    assert type(platform).__name__ == "SglxCpuPlatform"
    assert platform.is_out_of_tree()  # type: ignore[attr-defined]
    assert platform.get_device() == "cpu"  # type: ignore[attr-defined]
    assert platform.capabilities.supports_triton is False  # type: ignore[attr-defined]
    assert platform.get_default_attention_backend() == "torch_native"  # type: ignore[attr-defined]


def test_auto_discovery_activates_the_cpu_platform(
    host: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_profile("cpu", tmp_path, monkeypatch)
    assert type(resolve()).__name__ == "SglxCpuPlatform"


def test_activate_returns_none_without_kfd(
    host: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_profile("gfx942", tmp_path, monkeypatch)
    assert activate() is None
    # auto-discovery then falls back to sglang's own choice (no GPU here: the base platform)
    assert not type(resolve()).__name__.startswith("Sglx")


def test_explicit_selection_without_the_device_names_what_is_missing(
    host: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_profile("gfx942", tmp_path, monkeypatch)
    monkeypatch.setenv("SGLANG_PLATFORM", "sglx")
    with pytest.raises(PlatformError) as caught:
        resolve()
    assert caught.value.failure is FailureClass.DEVICE_INIT_FAILED
    assert "no KFD topology" in caught.value.detail
    assert "--device /dev/kfd --device /dev/dri" in caught.value.fix


def test_explicit_selection_without_a_profile_is_plugin_not_found(
    host: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SGLX_PROFILE", str(tmp_path / "nowhere.yaml"))
    monkeypatch.setenv("SGLANG_PLATFORM", "sglx")
    with pytest.raises(PlatformError) as caught:
        activate()
    assert caught.value.failure is FailureClass.PLUGIN_NOT_FOUND


@pytest.mark.parametrize(
    "arch,version", [("gfx942", 90402), ("gfx950", 90500), ("gfx1151", 110501)]
)
def test_kfd_gpu_of_the_right_target_activates_the_rocm_platform(
    arch: str, version: int, host: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_kfd_host(host, [version, version])
    use_profile(arch, tmp_path, monkeypatch)
    monkeypatch.setenv("SGLANG_PLATFORM", "sglx")
    platform = resolve()
    assert type(platform).__name__ == "SglxRocmPlatform"
    assert platform.is_rocm() and not platform.is_out_of_tree()  # type: ignore[attr-defined]


def test_a_gpu_of_another_target_means_the_wrong_image(
    host: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_kfd_host(host, [90500])
    use_profile("gfx942", tmp_path, monkeypatch)
    assert activate() is None
    monkeypatch.setenv("SGLANG_PLATFORM", "sglx")
    with pytest.raises(PlatformError) as caught:
        activate()
    assert "KFD lists only gfx950 GPUs" in caught.value.detail
    assert "run the sglx image built for them" in caught.value.fix


def test_kunlun_cards_activate_the_kunlun_platform(
    host: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_kunlun_host(host, cards=2)
    use_profile("kunlun", tmp_path, monkeypatch)
    monkeypatch.setenv("SGLANG_PLATFORM", "sglx")
    platform = resolve()
    assert type(platform).__name__ == "SglxKunlunPlatform"
    assert platform.device_type == "cuda"  # type: ignore[attr-defined]
    assert platform.capabilities.supports_pynccl is False  # type: ignore[attr-defined]
    assert platform.get_torch_distributed_backend_str() == "nccl"  # type: ignore[attr-defined]


def test_gen2_kunlun_cards_are_not_served(
    host: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_kunlun_host(host, cards=1, pci_device="0x3684")
    use_profile("kunlun", tmp_path, monkeypatch)
    assert activate() is None
