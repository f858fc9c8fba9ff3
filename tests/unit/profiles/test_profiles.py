"""Architecture profiles: the five shipped ones load, and bad ones fail with precise messages."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sglx_core.profile import ProfileError, known_arches, load_profile, load_profile_file

ARCHES = ["cpu", "gfx1151", "gfx942", "gfx950", "kunlun"]


@pytest.fixture
def images(tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private copy of images/ to break; SGLX_IMAGES_DIR points the tool at it."""
    root = tmp_path / "images"
    shutil.copytree(repo / "images", root, ignore=shutil.ignore_patterns("Dockerfile"))
    monkeypatch.setenv("SGLX_IMAGES_DIR", str(root))
    return root


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def issues_of(path: Path) -> list[str]:
    with pytest.raises(ProfileError) as caught:
        load_profile_file(path)
    return [str(issue) for issue in caught.value.issues]


def test_the_five_profiles_load() -> None:
    assert known_arches() == ARCHES
    for arch in ARCHES:
        profile = load_profile(arch)
        assert profile.arch == arch
        assert profile.schema_version == 1


def test_shared_values_come_from_fragments_not_copies() -> None:
    rocm = [load_profile(a) for a in ("gfx942", "gfx950", "gfx1151")]
    assert {p.platform.family for p in rocm} == {"rocm"}
    assert all(p.env["HSA_NO_SCRATCH_RECLAIM"] == "1" for p in rocm)
    # gfx1151 overrides the family default: AITER stays off on RDNA.
    assert load_profile("gfx1151").env["SGLANG_USE_AITER"] == "0"
    assert load_profile("gfx942").env["SGLANG_USE_AITER"] == "1"
    assert all(load_profile(a).env["HF_HUB_OFFLINE"] == "1" for a in ARCHES)


def test_gfx1151_defaults_to_triton_attention_and_refuses_fp8_kv_cache(
    sglx_json: Callable[..., tuple[int, dict[str, Any]]],
) -> None:
    code, envelope = sglx_json("arch", "show", "gfx1151")
    assert code == 0
    server = envelope["data"]["profile"]["server"]
    assert server["defaults"]["attention_backend"] == "triton"
    kv = server["rules"]["kv_cache_dtype"]
    assert kv["allow"] == ["auto", "bf16", "bfloat16"]
    assert not [d for d in kv["allow"] if "fp8" in d]
    assert envelope["data"]["profile"]["kernels"]["warp_size"] == 32


def test_kunlun_shows_disabled_features_device_nodes_and_scan_rules(
    sglx_json: Callable[..., tuple[int, dict[str, Any]]],
) -> None:
    code, envelope = sglx_json("arch", "show", "kunlun")
    assert code == 0
    profile = envelope["data"]["profile"]
    disabled = profile["server"]["disabled_features"]
    assert {"cuda_graph", "pynccl", "custom_all_reduce", "radix_cache"} <= set(disabled)
    assert disabled["custom_all_reduce"]["forced"] is True
    assert [n["path"] for n in profile["devices"]["nodes"]][:2] == [
        "/dev/xpu[0-9]*",
        "/dev/xpuctrl",
    ]
    assert "libnccl.so*" in profile["scan"]["forbidden"]
    assert "libbkcl.so" in profile["scan"]["require"]
    assert profile["platform"]["capabilities"]["supports_pynccl"] is False


def test_cpu_has_a_bounded_kv_cache_by_default(
    sglx_json: Callable[..., tuple[int, dict[str, Any]]],
) -> None:
    code, envelope = sglx_json("arch", "show", "cpu")
    assert code == 0
    server = envelope["data"]["profile"]["server"]
    assert server["defaults"]["max_total_tokens"] == 4096
    assert server["defaults"]["mem_fraction_static"] <= 0.1
    assert server["memory"]["require_max_total_tokens"] is True
    assert "SGLANG_USE_CPU_ENGINE" in envelope["data"]["profile"]["env_forbidden"]


def test_unknown_key_is_named_with_a_suggestion_and_the_line(images: Path) -> None:
    path = images / "cpu" / "arch.yaml"
    edit(path, "  shm_size: 1g\n", "  shm_size: 1g\n  shm_sise: 2g\n")
    (issue,) = issues_of(path)
    assert "cpu/arch.yaml:" in issue
    assert "container.shm_sise: unknown key 'shm_sise'; did you mean 'shm_size'?" in issue
    line = int(issue.split("arch.yaml:")[1].split(":")[0])
    assert path.read_text().splitlines()[line - 1].strip() == "shm_sise: 2g"


def test_wrong_type_says_what_was_expected_and_found(images: Path) -> None:
    path = images / "cpu" / "arch.yaml"
    edit(path, "  shm_size: 1g\n", "  shm_size: 1g\n  port: '30000'\n")
    (issue,) = issues_of(path)
    assert "container.port: expected an integer, found '30000' (a string)" in issue


def test_unquoted_version_gets_a_quoting_hint(images: Path) -> None:
    path = images / "cpu" / "arch.yaml"
    edit(path, 'version: "3.11"', "version: 3.10")
    (issue,) = issues_of(path)
    assert "python.version: expected a string, found 3.1 (a number); quote it" in issue


def test_yaml_booleans_in_an_enum_are_explained(images: Path) -> None:
    path = images / "cpu" / "arch.yaml"
    edit(path, "speculative_decoding: never", "speculative_decoding: off")
    (issue,) = issues_of(path)
    assert "server.speculative_decoding: expected one of 'never', 'opt_in' or 'auto'" in issue
    assert "found False (a boolean); YAML reads on/off/yes/no as booleans" in issue


def test_missing_required_field_is_named(images: Path) -> None:
    path = images / "kunlun" / "arch.yaml"
    edit(path, "    version_file: /proc/kunlun/version\n", "")
    (issue,) = issues_of(path)
    assert "devices.probe.version_file: required key is missing" in issue


def test_a_pinned_floor_names_where_the_host_reports_it(images: Path) -> None:
    # The bug this guards: a firmware floor with no file and no tool failed on every host.
    path = images / "kunlun" / "arch.yaml"
    edit(path, "    tool: xpu-smi\n", "")
    (issue,) = issues_of(path)
    assert "host.firmware: min_version '1.48' is pinned but nothing says where the host" in issue
    assert "set 'version_file' (a file) or 'tool' (e.g. xpu-smi)" in issue


def test_a_floor_reads_one_source_not_two(images: Path) -> None:
    path = images / "kunlun" / "arch.yaml"
    edit(path, "    tool: xpu-smi\n", "    tool: xpu-smi\n    version_file: /proc/kunlun/fw\n")
    (issue,) = issues_of(path)
    assert "host.firmware: set one of 'version_file' and 'tool', not both" in issue


def test_a_driver_floor_is_not_read_from_a_tool(images: Path) -> None:
    path = images / "kunlun" / "arch.yaml"
    driver = "    version_file: /proc/kunlun/version\n    note: FastDeploy's P800 requirement (dr"
    edit(path, driver, driver.replace("version_file: /proc/kunlun/version", "tool: xpu-smi"))
    (issue,) = issues_of(path)
    assert "host: driver.tool 'xpu-smi': a driver floor is read from its version_file" in issue


def test_missing_required_top_level_field_is_named(images: Path) -> None:
    path = images / "cpu" / "arch.yaml"
    edit(path, "description: x86-64 reference", "# description: x86-64 reference")
    (issue,) = issues_of(path)
    assert issue.endswith("description: required key is missing")


def test_invalid_yaml_fails_with_the_line(images: Path) -> None:
    path = images / "gfx942" / "arch.yaml"
    edit(path, "env:\n  PYTORCH_ROCM_ARCH: gfx942", "env:\n  PYTORCH_ROCM_ARCH: [gfx942")
    (issue,) = issues_of(path)
    assert "gfx942/arch.yaml:" in issue
    assert "invalid YAML" in issue


def test_duplicate_keys_are_refused(images: Path) -> None:
    path = images / "cpu" / "arch.yaml"
    edit(path, "  shm_size: 1g\n", "  shm_size: 1g\n  shm_size: 2g\n")
    (issue,) = issues_of(path)
    assert "container.shm_size: duplicate key" in issue


def test_an_error_in_a_shared_fragment_names_that_fragment(images: Path) -> None:
    edit(images / "shared" / "rocm.yaml", "  groups: [video, render]", "  groups: video")
    (issue,) = issues_of(images / "gfx950" / "arch.yaml")
    assert "shared/rocm.yaml:" in issue
    assert "devices.groups: expected a list, found 'video' (a string)" in issue


def test_unknown_fragment_lists_the_available_ones(images: Path) -> None:
    path = images / "gfx942" / "arch.yaml"
    edit(path, "extends: cdna", "extends: cdna3")
    (issue,) = issues_of(path)
    assert "extends: no shared fragment 'cdna3'" in issue
    assert "available: base, cdna, rocm" in issue


def test_extends_cycles_are_refused(images: Path) -> None:
    edit(images / "shared" / "base.yaml", "schema_version: 1", "extends: rocm\nschema_version: 1")
    (issue,) = issues_of(images / "gfx942" / "arch.yaml")
    assert "extends: cycle:" in issue


def test_arch_must_match_its_folder(images: Path) -> None:
    path = images / "gfx950" / "arch.yaml"
    edit(path, "arch: gfx950", "arch: gfx942")
    (issue,) = issues_of(path)
    assert "arch: expected 'gfx950' (the folder name), found 'gfx942'" in issue


def test_a_default_refused_by_its_own_rule_is_caught(images: Path) -> None:
    edit(
        images / "gfx1151" / "arch.yaml", "attention_backend: triton\n", "attention_backend: fa3\n"
    )
    (issue,) = issues_of(images / "gfx1151" / "arch.yaml")
    assert "default attention_backend='fa3' is refused by rules.attention_backend" in issue


def test_probe_must_fit_the_family(images: Path) -> None:
    edit(images / "cpu" / "arch.yaml", "  family: cpu", "  family: rocm")
    (issue,) = issues_of(images / "cpu" / "arch.yaml")
    assert "platform.family 'rocm' needs devices.probe.kind 'kfd', found 'none'" in issue


def test_several_problems_are_all_reported(images: Path) -> None:
    path = images / "cpu" / "arch.yaml"
    edit(path, "  shm_size: 1g\n", "  shm_size: one\n  colour: blue\n")
    issues = issues_of(path)
    assert len(issues) == 2
    assert any("container.shm_size: expected a value matching" in i for i in issues)
    assert any("container.colour: unknown key" in i for i in issues)


# --- host.kernel_cmdline, host.after_boot, host.driver.module (issue 22, item 3) --------------


def test_a_kernel_argument_without_its_source_is_refused(images: Path) -> None:
    from helpers.images_copy import edit_yaml

    path = images / "kunlun" / "arch.yaml"
    edit_yaml(path, {"host": {"kernel_cmdline": ["iommu=pt"]}})
    (issue,) = issues_of(path)
    assert "host.kernel_cmdline[0]" in issue and "mapping" in issue


def test_a_kernel_argument_is_one_word_and_listed_once(images: Path) -> None:
    from helpers.images_copy import edit_yaml

    path = images / "kunlun" / "arch.yaml"
    edit_yaml(path, {"host": {"kernel_cmdline": [{"arg": "a b", "source": "s"}]}})
    assert any("host.kernel_cmdline[0].arg" in issue for issue in issues_of(path))
    twice = [{"arg": "iommu=pt", "source": "s"}] * 2
    edit_yaml(path, {"host": {"kernel_cmdline": twice}})
    assert any("kernel_cmdline lists ['iommu=pt'] more than once" in i for i in issues_of(path))


def test_only_a_module_the_host_loads_can_be_loaded_after_boot(images: Path) -> None:
    from helpers.images_copy import edit_yaml

    path = images / "gfx942" / "arch.yaml"
    edit_yaml(path, {"host": {"after_boot": {"modules": ["amdkfd"], "source": "s"}}})
    (issue,) = issues_of(path)
    assert "after_boot.modules ['amdkfd'] are not in host.modules ['amdgpu']" in issue


def test_the_blacklist_is_the_roles_not_the_profiles(images: Path) -> None:
    from helpers.images_copy import edit_yaml

    path = images / "gfx942" / "arch.yaml"
    arg = {"arg": "modprobe.blacklist=amdgpu", "source": "s"}
    edit_yaml(path, {"host": {"kernel_cmdline": [arg]}})
    (issue,) = issues_of(path)
    assert "carries modprobe.blacklist= while after_boot is set" in issue


def test_a_module_fallback_needs_the_version_file_it_stands_in_for(images: Path) -> None:
    from helpers.images_copy import edit_yaml

    path = images / "gfx1151" / "arch.yaml"
    edit_yaml(path, {"host": {"driver": {"version_file": None}}})
    (issue,) = issues_of(path)
    assert "module 'amdgpu' is read only when version_file is absent: set version_file" in issue


def test_each_family_debugs_its_own_collective_library() -> None:
    """comm_debug (ansible comm-debug.yml): torch.distributed's switches everywhere, RCCL's log
    and torch's flight recorder on ROCm, BKCL's log on Kunlun; each variable with its source,
    and none the profile forbids."""
    families = {"cpu": set(), "gfx942": {"NCCL_DEBUG", "TORCH_NCCL_TRACE_BUFFER_SIZE"},
                "gfx1151": {"NCCL_DEBUG"}, "kunlun": {"BKCL_DEBUG"}}  # fmt: skip
    for arch, own in families.items():
        profile = load_profile(arch)
        names = set(profile.comm_debug)
        assert {"TORCH_DISTRIBUTED_DEBUG", "TORCH_CPP_LOG_LEVEL"} | own <= names, arch
        assert not names & set(profile.env_forbidden), arch
        assert all(var.source for var in profile.comm_debug.values()), arch
    assert "NCCL_DEBUG" not in load_profile("kunlun").comm_debug  # BKCL is not RCCL


def test_no_profile_sets_an_msccl_variable() -> None:
    """Issue 40 item 11: the rocm10 images ship RCCL 2.30.4, which has no MSCCL at all (read
    from v0.5.19-rocm10-mi35x; RCCL's environment variables, docs-10.0.0), so an MSCCL switch in
    a profile would be dead configuration."""
    for arch in known_arches():
        profile = load_profile(arch)
        names = [*profile.env, *profile.comm_debug]
        for serving in profile.serving.profiles.values():
            names += list(serving.env)
        assert not [n for n in names if "MSCCL" in n], arch
