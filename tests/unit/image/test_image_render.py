"""images/<arch>/Dockerfile and deps.sh are rendered from their templates and must not drift."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.images_copy import copy_images, edit_yaml

from sglx.image.render import render_deps_script, render_dockerfile
from sglx_core.profile import load_profile

CliRunner = Callable[..., tuple[int, str, str]]


def test_committed_dockerfiles_match_the_template(sglx: CliRunner) -> None:
    code, out, _ = sglx("image", "render", "--check")
    assert code == 0, out
    assert out.count("up to date") == 10  # a Dockerfile and a deps.sh per arch


def test_a_profile_change_makes_a_dockerfile_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sglx: CliRunner
) -> None:
    images = copy_images(tmp_path)
    monkeypatch.setenv("SGLX_IMAGES_DIR", str(images))
    edit_yaml(images / "gfx950" / "arch.yaml", {"env": {"SGLANG_AITER_MLA_DECODE_BACKEND": "asm"}})
    code, out, _ = sglx("image", "render", "--check")
    assert code == 1
    rows = [line.split() for line in out.splitlines() if line.split()[-1:] == ["STALE"]]
    assert [row[0].endswith("images/gfx950/Dockerfile") for row in rows] == [True]
    assert "run `sglx image render`" in out


@pytest.mark.parametrize("arch", ["cpu", "gfx942", "gfx1151", "kunlun"])
def test_arch_facts_come_from_the_profile(arch: str) -> None:
    profile = load_profile(arch)
    text = render_dockerfile(profile)
    assert f'org.opencontainers.image.base.name="{profile.base.ref}"' in text
    for name, value in profile.env.items():
        assert f'{name}="{value}"' in text
    assert f"EXPOSE {profile.container.port}" in text
    system_site = "--system-site-packages" in render_deps_script(profile)
    assert system_site == bool(profile.base.provides)
    if profile.devices.groups:
        assert f"--groups {','.join(profile.devices.groups)}" in text


def test_the_build_is_hermetic_by_construction() -> None:
    for arch in ("cpu", "gfx942"):
        text = render_deps_script(load_profile(arch))
        assert "apt-get" not in text and "curl" not in text
        assert "--no-index" in text and "--require-hashes" in text
