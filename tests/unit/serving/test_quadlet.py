"""The run spec as a podman Quadlet unit (sglx.quadlet, issue 39 item 3): every option of the
`docker run` line lands in the unit, each value reads back as it was, and a value a key cannot
carry is refused. podman's own generator reads the unit in
tests/integration/test_site_engines.py."""

from __future__ import annotations

import shlex
from collections import Counter
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglx.quadlet import WHOLE, quadlet_unit
from sglx.run_spec import RunSpec, Site, docker_run_words, run_spec
from sglx_core.errors import SglxError
from sglx_core.profile import load_profile

ARCHES = ["cpu", "gfx942", "gfx950", "gfx1151", "kunlun"]
IMAGE_ID = "sha256:" + "a" * 64


def site(**more: object) -> Site:
    return Site(image="sglx/x:1", name="sglx-x", image_id=IMAGE_ID, **more)  # type: ignore[arg-type]


def keys(unit: str) -> dict[str, list[str]]:
    """Each section's KEY=VALUE lines, the keys prefixed by their section: {'Container.Volume':
    [values]}."""
    found: dict[str, list[str]] = {}
    section = ""
    for line in unit.split("\n"):  # systemd ends a line at \n only
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
        elif "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            found.setdefault(f"{section}.{key}", []).append(value)
    return found


def read_word(word: str) -> str:
    """A word as systemd hands it on: quotes and escapes removed, `%%` and `$$` single."""
    (value,) = shlex.split(word)
    return value.replace("%%", "%").replace("$$", "$")


@pytest.mark.parametrize("arch", ARCHES)
def test_every_option_of_the_run_line_lands_in_the_unit(arch: str) -> None:
    spec = run_spec(load_profile(arch))
    here = site(gids=dict.fromkeys(spec.groups, 44), model_dir="/srv/models/m")
    words = docker_run_words(spec, here)
    flags = Counter(w for w in words if w.startswith("-"))
    found = keys(quadlet_unit(spec, here))
    assert found["Container.Image"] == ["sglx/x:1"]
    assert found["Container.ContainerName"] == ["sglx-x"]
    assert len(found.get("Container.Volume", [])) == flags["-v"]
    assert len(found.get("Container.AddDevice", [])) == flags["--device"]
    assert len(found.get("Container.Environment", [])) == flags["-e"]
    assert "/srv/models/m:/models/model:ro" in found["Container.Volume"]
    passed = shlex.split(" ".join(found.get("Container.PodmanArgs", [])))
    assert passed.count("--group-add") == flags["--group-add"]
    for option in ("--ipc", "--shm-size", "--ulimit"):
        assert passed.count(option) == flags[option], option
    assert found["Service.Restart"] == [spec.restart]
    assert "Container.Exec" not in found or spec.server_args


def test_an_environment_value_reads_back_as_it_was() -> None:
    value = 'a b %h $HOME "q" \\ ;'
    spec = run_spec(load_profile("cpu"))
    found = keys(quadlet_unit(spec, site(extra_env={"ODD": value})))
    (odd,) = [v for v in found["Container.Environment"] if v.startswith('"ODD=')]
    assert read_word(odd) == f"ODD={value}"


def test_a_value_a_whole_key_cannot_carry_is_refused_naming_the_key(tmp_path: Path) -> None:
    spec = run_spec(load_profile("cpu"))
    with pytest.raises(SglxError, match=r"Volume= would be .*a value there cannot be quoted"):
        quadlet_unit(spec, site(model_dir=str(tmp_path / "my models")))


def test_a_control_character_is_refused() -> None:
    spec = run_spec(load_profile("cpu"))
    with pytest.raises(SglxError, match="control character"):
        quadlet_unit(spec, site(extra_env={"X": "a\nExecStartPre=/bin/false"}))


# Any printable text: the characters systemd and Quadlet treat specially (quotes, `\\`, `%`,
# `$`, spaces, `;`) included, control characters left out (refused above).
PRINTABLE = st.text(
    st.characters(min_codepoint=0x20, max_codepoint=0x2FF, exclude_characters="\x7f")
)
ENV_NAMES = st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True)


@cache
def cpu_spec() -> RunSpec:
    return run_spec(load_profile("cpu"))


@given(st.dictionaries(ENV_NAMES, PRINTABLE, min_size=1, max_size=4))
def test_any_environment_value_reads_back_as_it_was(env: dict[str, str]) -> None:
    """Every value of extra_env, whatever it holds, reaches the container as it was: the
    Environment= words, read as systemd reads them, give back KEY=VALUE."""
    found = keys(quadlet_unit(cpu_spec(), site(extra_env=env)))
    read = dict(read_word(w).partition("=")[::2] for w in found["Container.Environment"])
    for name, value in env.items():
        assert read[name] == value


@given(PRINTABLE.filter(lambda s: s.strip() != ""))
def test_a_model_folder_lands_as_it_was_or_is_refused_naming_the_key(folder: str) -> None:
    """Volume= is taken whole: a folder of plain characters lands verbatim, any other is
    refused with the key named (never written half-quoted)."""
    path = "/srv/" + folder
    try:
        found = keys(quadlet_unit(cpu_spec(), site(model_dir=path)))
    except SglxError as e:
        assert not WHOLE.fullmatch(path) and "Volume= would be" in str(e)
    else:
        assert WHOLE.fullmatch(path)
        assert f"{path}:/models/model:ro" in found["Container.Volume"]
