"""`sglx ansible vars`: the arch profile rendered into the roles' variables."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sglx.ansible_vars import render_vars
from sglx.run_spec import Site, docker_run_words, run_spec
from sglx_core.device_lock import LOCK_DIR_ENV
from sglx_core.profile import known_arches, load_profile

REPO = Path(__file__).resolve().parents[3]
ROLES = REPO / "ansible" / "roles"
EXAMPLE_VARS = REPO / "ansible" / "inventory" / "example" / "group_vars"


def role_defaults() -> dict[str, set[str]]:
    return {
        role.name: set(yaml.safe_load((role / "defaults" / "main.yml").read_text()))
        for role in ROLES.iterdir()
        if (role / "defaults" / "main.yml").is_file()  # sglx_escape: filters, no variables
    }


def test_gfx942_vars_carry_the_profile_host_facts() -> None:
    rendered = render_vars(load_profile("gfx942"))
    # AMD's system-acceptance list; the blacklist is the site's opt-in (after_boot), not here.
    assert rendered["accel_host_kernel_cmdline"] == [
        "pci=realloc=off", "pci=bfsort", "iommu=pt", "numa_balancing=disable",
    ]  # fmt: skip
    assert rendered["accel_host_after_boot_modules"] == ["amdgpu"]
    assert rendered["accel_host_driver"] == {
        "min_version": "6.14.14",
        "version_file": "/sys/module/amdgpu/version",
        "note": load_profile("gfx942").host.driver.note,  # type: ignore[union-attr]
        "module": "amdgpu",
    }
    assert rendered["accel_host_sysctl"] == {"kernel.numa_balancing": "0"}
    assert rendered["accel_host_service_env"] == {"GPU_MAX_HW_QUEUES": "2"}
    assert rendered["accel_host_device_groups"] == ["video", "render"]
    assert rendered["accel_host_node_dirs"] == ["/dev", "/dev/dri"]
    assert rendered["accel_host_node_modes"] == [
        {"name": "kfd", "group": "render", "mode": "0660"},
        {"name": "renderD*", "group": "render", "mode": "0660"},
    ]
    assert rendered["sglang_service_env"]["PYTORCH_ROCM_ARCH"] == "gfx942"
    assert rendered["sglang_service_env_forbidden"] == ["HSA_OVERRIDE_GFX_VERSION"]


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_every_amd_kernel_argument_names_amds_document(arch: str) -> None:
    """The sources are data in the profile: each argument cites AMD's system-acceptance page."""
    host = load_profile(arch).host
    acceptance = "https://instinct.docs.amd.com/projects/system-acceptance/"
    assert all(acceptance in a.source for a in host.kernel_cmdline)
    assert host.after_boot is not None and acceptance in host.after_boot.source
    assert render_vars(load_profile(arch))["accel_host_after_boot_modules"] == ["amdgpu"]


def test_arches_without_an_after_boot_module_render_none() -> None:
    for arch in ("cpu", "kunlun", "gfx1151"):
        assert render_vars(load_profile(arch))["accel_host_after_boot_modules"] == []
    assert "module" not in render_vars(load_profile("kunlun"))["accel_host_driver"]


def test_kunlun_vars_carry_modes_modules_and_floors() -> None:
    rendered = render_vars(load_profile("kunlun"))
    assert rendered["accel_host_node_modes"] == [{"name": "xpu*", "mode": "0666"}]
    assert rendered["accel_host_modules"] == ["kunlun"]
    assert rendered["accel_host_driver"]["min_version"] == "5.0.21.26"
    assert rendered["accel_host_driver"]["version_file"] == "/proc/kunlun/version"
    assert rendered["accel_host_firmware"]["min_version"] == "1.48"
    # No file reports the firmware: the role and the checks read it with xpu-smi -q.
    assert rendered["accel_host_firmware"]["tool"] == "xpu-smi"
    assert rendered["accel_host_firmware"]["version_file"] == ""
    assert "tool" not in rendered["accel_host_driver"]
    assert rendered["sglang_service_run_options"][-2:] == ["--ulimit", "memlock=-1"]


@pytest.mark.parametrize("arch", known_arches())
def test_every_way_to_run_the_server_mounts_one_lock_folder(arch: str) -> None:
    """The unit (role vars) and install.sh / bundle install (docker_run_words) mount the
    profile's device-init lock folder with the same words, and name it in the variable the
    plugin reads; the image does not bake it (a container run by hand keeps its own lock)."""
    profile = load_profile(arch)
    lock = profile.container.lock_dir
    words = ["-v", f"{lock.source}:{lock.target}:ro", "-e", f"{LOCK_DIR_ENV}={lock.target}"]
    assert render_vars(profile)["sglang_service_lock_dir"] == {
        "source": lock.source,
        "target": lock.target,
        "env": {LOCK_DIR_ENV: lock.target},
        "args": words,
    }
    gids = dict.fromkeys(profile.devices.groups, 1000)
    run = docker_run_words(run_spec(profile), Site(image="sglx/x:1", name="x", gids=gids))
    at = run.index(words[1]) - 1
    assert run[at : at + 4] == words
    assert LOCK_DIR_ENV not in profile.env
    assert LOCK_DIR_ENV in profile.ranks.per_node_env


@pytest.mark.parametrize("arch", known_arches())
def test_every_rendered_variable_belongs_to_a_role(arch: str) -> None:
    owners = role_defaults()
    for key in render_vars(load_profile(arch)):
        if key == "sglx_arch":
            continue
        role = key.split("_")[0] + "_" + key.split("_")[1]
        assert key in owners[role], f"{key} is not a default of role {role}"


@pytest.mark.parametrize("arch", known_arches())
def test_committed_example_vars_are_current(sglx, arch: str) -> None:  # type: ignore[no-untyped-def]
    path = EXAMPLE_VARS / arch / "sglx_profile.yml"
    code, out, err = sglx("ansible", "vars", "--arch", arch, "--out", str(path), "--check")
    assert (code, err) == (0, ""), out
    assert "is up to date" in out


def test_stale_vars_file_is_a_finding_naming_the_fix(sglx, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    stale = tmp_path / "sglx_profile.yml"
    stale.write_text("---\nsglx_arch: gfx942\n")
    code, out, err = sglx("ansible", "vars", "--arch", "gfx942", "--out", str(stale), "--check")
    assert code == 1
    assert f"{stale} differs from the profile" in out
    assert f"sglx ansible vars --arch gfx942 --out {stale}" in out
    assert "Traceback" not in out + err
    assert stale.read_text() == "---\nsglx_arch: gfx942\n"


def test_missing_vars_file_is_a_finding(sglx_json, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    code, envelope = sglx_json(
        "ansible", "vars", "--arch", "cpu", "--out", str(tmp_path / "none.yml"), "--check"
    )
    assert code == 1
    assert envelope["findings"][0]["code"] == "ansible_vars_stale"
    assert envelope["findings"][0]["message"].endswith("none.yml is missing")


def test_out_writes_the_file_atomically_and_it_loads(sglx, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "group_vars" / "gfx942" / "sglx_profile.yml"
    code, stdout, err = sglx("ansible", "vars", "--arch", "gfx942", "--out", str(out))
    assert (code, err) == (0, "")
    assert f"wrote {out}" in stdout
    assert yaml.safe_load(out.read_text()) == render_vars(load_profile("gfx942"))
    assert out.read_text().startswith("---\n# GENERATED by `sglx ansible vars --arch gfx942`")
    assert [p.name for p in out.parent.iterdir()] == ["sglx_profile.yml"]


def test_stdout_is_the_yaml_and_json_carries_the_vars(sglx, sglx_json) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = sglx("ansible", "vars", "--arch", "cpu")
    assert code == 0
    assert yaml.safe_load(out)["sglx_arch"] == "cpu"
    code, envelope = sglx_json("ansible", "vars", "--arch", "cpu")
    assert code == 0
    assert envelope["data"]["vars"]["sglang_service_run_options"][:4] == [
        "--ipc", "private", "--shm-size", "1g",
    ]  # fmt: skip


def test_check_without_out_is_a_usage_error(sglx) -> None:  # type: ignore[no-untyped-def]
    code, out, err = sglx("ansible", "vars", "--arch", "cpu", "--check")
    assert code == 2
    assert "--check needs --out FILE" in err
    assert "hint: sglx ansible vars --arch cpu --out PATH --check" in err
    assert "Traceback" not in out + err


def test_out_naming_a_folder_is_refused(sglx, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    code, out, err = sglx("ansible", "vars", "--arch", "cpu", "--out", str(tmp_path))
    assert code == 2
    assert f"--out {tmp_path} is a folder" in err
    assert "Traceback" not in out + err
    assert list(tmp_path.iterdir()) == []


def test_unknown_arch_is_refused(sglx) -> None:  # type: ignore[no-untyped-def]
    code, out, err = sglx("ansible", "vars", "--arch", "nosuch")
    assert code == 2
    assert "nosuch" in err
    assert "Traceback" not in out + err
