"""Hostile profiles: alias bombs, recursion, deep nesting, odd bytes, huge files and names that
leave the images folder all stop with the file, the line and what to do, never a traceback."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.images_copy import copy_images

from sglx_core.profile.bounded_yaml import MAX_ALIAS_NODES, MAX_DEPTH, BoundedSafeLoader

CliRunner = Callable[..., tuple[int, str, str]]


@pytest.fixture
def images(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = copy_images(tmp_path)
    monkeypatch.setenv("SGLX_IMAGES_DIR", str(root))
    return root


def append(path: Path, text: str) -> int:
    """Append `text` to the YAML file; returns the line number its first line gets."""
    before = path.read_text()
    if not before.endswith("\n"):
        before += "\n"
    path.write_text(before + text)
    return before.count("\n") + 1


def billion_laughs(levels: int = 9) -> str:
    lines = ['lol0: &lol0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, levels + 1):
        aliases = ", ".join([f"*lol{level - 1}"] * 9)
        lines.append(f"lol{level}: &lol{level} [{aliases}]")
    return "\n".join(lines) + "\n"


def extends_line(profile: Path) -> int:
    text = profile.read_text()
    return text[: text.index("extends: base\n")].count("\n") + 1


def assert_profile_error(sglx: CliRunner, where: str, *words: str) -> str:
    """`sglx arch show cpu` exits 2, its message starting with `where` (e.g. 'FILE:LINE:')
    and holding `words`; returns stderr."""
    code, out, err = sglx("arch", "show", "cpu")
    assert code == 2
    assert out == ""
    assert f"sglx: error: {where}" in err
    for word in words:
        assert word in err
    assert "Traceback" not in err
    return err


# --------------------------------------------------------------------------------------------
# Aliases
# --------------------------------------------------------------------------------------------


def test_a_billion_laughs_stops_at_the_alias_that_crosses_the_budget(
    sglx: CliRunner, images: Path
) -> None:
    profile = images / "cpu" / "arch.yaml"
    first = append(profile, billion_laughs())
    # Aliases reach 90 nodes in lol1, 819 in lol2, 7380 in lol3; lol4's first alias of lol3
    # (7381 nodes) crosses the budget.
    assert_profile_error(
        sglx,
        f"{profile}:{first + 4}:",
        f"aliases expand to more than {MAX_ALIAS_NODES} nodes (at '*lol3')",
        "billion laughs",
        "hint: write the repeated values out",
    )


def test_a_billion_laughs_is_cheap_in_a_real_process(tmp_path: Path) -> None:
    """Run in a child bounded to 1 GiB of address space and 60 s of CPU: before the fix it grew
    to gigabytes within seconds, so a regression fails here (MemoryError, or killed), not hang
    the suite. (The child's ru_maxrss is no measure: it counts the pages it shared with this
    large pytest process between fork and exec.)"""
    bomb = tmp_path / "arch.yaml"
    bomb.write_text("arch: bomb\n" + billion_laughs())
    out, err = tmp_path / "out", tmp_path / "err"

    def bounds() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        resource.setrlimit(resource.RLIMIT_CPU, (60, 60))

    started = time.monotonic()
    with out.open("w") as stdout, err.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sglx.cli", "arch", "validate", str(bomb)],
            stdout=stdout,
            stderr=stderr,
            preexec_fn=bounds,
        )
        watchdog = threading.Timer(120, proc.kill)
        watchdog.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            watchdog.cancel()
            proc.returncode = os.waitstatus_to_exitcode(status)
    elapsed = time.monotonic() - started
    assert proc.returncode == 1, err.read_text()
    assert f"aliases expand to more than {MAX_ALIAS_NODES} nodes" in out.read_text()
    assert "Traceback" not in err.read_text()
    assert usage.ru_utime < 30, f"{usage.ru_utime:.1f} s of CPU"
    assert elapsed < 60


def test_an_alias_inside_its_own_anchor_is_refused(sglx: CliRunner, images: Path) -> None:
    profile = images / "cpu" / "arch.yaml"
    first = append(profile, "loop: &loop\n  - one\n  - *loop\n")
    assert_profile_error(
        sglx,
        f"{profile}:{first + 2}:",
        f"alias '*loop' is used inside its own anchor '&loop' (line {first})",
        "a recursive structure never ends",
    )


def test_aliases_cannot_nest_past_the_depth_bound(sglx: CliRunner, images: Path) -> None:
    profile = images / "cpu" / "arch.yaml"
    deep = "[" * 40 + "x" + "]" * 40  # 41 levels: fine alone
    around = "[" * 25 + "*a" + "]" * 25  # 26 levels around the alias: 67 in all
    first = append(profile, f"a: &a {deep}\nb: {around}\n")
    assert_profile_error(
        sglx,
        f"{profile}:{first + 1}:",
        f"alias '*a' nests the document more than {MAX_DEPTH} levels deep",
    )


def test_an_undefined_alias_is_invalid_yaml(sglx: CliRunner, images: Path) -> None:
    profile = images / "cpu" / "arch.yaml"
    first = append(profile, "x: *nowhere\n")
    assert_profile_error(sglx, f"{profile}:{first}:", "invalid YAML: found undefined alias")


def test_modest_aliases_and_merge_keys_load_as_pyyaml_loads_them() -> None:
    text = (
        "defaults: &defaults {port: 30000, env: {A: '1'}}\n"
        "one: {<<: *defaults, port: 30001}\n"
        "list: &items [a, b, c]\n"
        "again: *items\n"
    )
    loader = BoundedSafeLoader(text)
    try:
        assert loader.get_single_data() == yaml.safe_load(text)
    finally:
        loader.dispose()


# --------------------------------------------------------------------------------------------
# Nesting, bytes and size
# --------------------------------------------------------------------------------------------


def test_brackets_thousands_deep_are_refused(sglx: CliRunner, images: Path) -> None:
    profile = images / "cpu" / "arch.yaml"
    first = append(profile, "deep: " + "[" * 5000 + "]" * 5000 + "\n")
    assert_profile_error(sglx, f"{profile}:{first}:", f"nested more than {MAX_DEPTH} levels deep")


def test_indentation_hundreds_deep_is_refused(sglx: CliRunner, images: Path) -> None:
    profile = images / "cpu" / "arch.yaml"
    text = "".join(f"{' ' * level}k{level}:\n" for level in range(300)) + " " * 300 + "x\n"
    first = append(profile, text)
    # The mapping k{n} opens sits at depth n + 2, its key one deeper: k63 is the 65th level.
    assert_profile_error(
        sglx, f"{profile}:{first + MAX_DEPTH - 1}:", f"nested more than {MAX_DEPTH} levels deep"
    )


def test_a_profile_that_is_not_utf8_names_the_line(sglx: CliRunner, images: Path) -> None:
    profile = images / "cpu" / "arch.yaml"
    first = append(profile, "")
    profile.write_bytes(profile.read_bytes() + b"# caf\xe9 (latin-1)\n")
    assert_profile_error(
        sglx, f"{profile}:{first}:", "not UTF-8 text (byte 0xe9)", "hint: save the file as UTF-8"
    )


def test_a_fragment_that_is_not_utf8_is_named(sglx: CliRunner, images: Path) -> None:
    fragment = images / "shared" / "base.yaml"
    fragment.write_bytes(b"\xff\xfe" + fragment.read_bytes())
    assert_profile_error(sglx, f"{fragment}:1:", "not UTF-8 text (byte 0xff)")


def test_a_huge_profile_is_refused_before_parsing(sglx: CliRunner, images: Path) -> None:
    profile = images / "cpu" / "arch.yaml"
    append(profile, "# " + "x" * (1024 * 1024) + "\n")
    assert_profile_error(sglx, f"{profile}: ", "larger than 1024 KiB", "is this the right file?")


# --------------------------------------------------------------------------------------------
# Names that would leave the images folder
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["../../outside", "/etc/hostname", "sub/base", ".base", "Base"])
def test_extends_takes_plain_fragment_names_only(sglx: CliRunner, images: Path, name: str) -> None:
    outside = images.parent / "outside.yaml"
    outside.write_text("description: read from outside images/shared\n")
    profile = images / "cpu" / "arch.yaml"
    line = extends_line(profile)
    text = profile.read_text()
    profile.write_text(text.replace("extends: base\n", f"extends: [base, {json.dumps(name)}]\n"))
    err = assert_profile_error(
        sglx,
        f"{profile}:{line}: ",
        f"extends: invalid fragment name {name!r}",
        "lowercase letters, digits, '-' and '_'",
        "hint: e.g. `extends: [base, rocm]`",
    )
    assert "read from outside" not in err


def test_a_fragment_linked_from_outside_is_refused(sglx: CliRunner, images: Path) -> None:
    outside = images.parent / "outside.yaml"
    outside.write_text("description: read from outside images/shared\n")
    (images / "shared" / "evil.yaml").symlink_to(outside)
    profile = images / "cpu" / "arch.yaml"
    line = extends_line(profile)
    profile.write_text(profile.read_text().replace("extends: base\n", "extends: [base, evil]\n"))
    assert_profile_error(
        sglx,
        f"{profile}:{line}: extends: ",
        f"fragment 'evil' ({images}/shared/evil.yaml) is a link to {outside}",
    )


def test_fragments_extended_over_and_over_stop_at_the_chain_bound(
    sglx: CliRunner, images: Path
) -> None:
    shared = images / "shared"
    (shared / "f0.yaml").write_text("extends: base\n")
    for level in range(1, 7):  # each level loads the one below twice: 2**6 files
        (shared / f"f{level}.yaml").write_text(f"extends: [f{level - 1}, f{level - 1}]\n")
    profile = images / "cpu" / "arch.yaml"
    profile.write_text(profile.read_text().replace("extends: base\n", "extends: f6\n"))
    assert_profile_error(sglx, f"{shared}/f", "the extends chain loads more than 32 files")


@pytest.mark.parametrize("arch", ["../x", "..", "cpu/../cpu", "/etc", "CPU", "cpu "])
def test_arch_names_are_plain_names(sglx: CliRunner, arch: str) -> None:
    code, out, err = sglx("arch", "show", arch)
    assert code == 2
    assert out == ""
    assert f"sglx: error: invalid arch name {arch!r}: an arch is a plain name" in err
    assert "hint: e.g. cpu or gfx942; `sglx arch list` shows the known arches" in err
    assert "Traceback" not in err


def test_a_bad_arch_name_with_json_is_a_usage_error(
    sglx_json: Callable[..., tuple[int, dict[str, Any]]],
) -> None:
    code, envelope = sglx_json("wheels", "lock", "--arch", "../../etc", "--check")
    assert code == 2
    (error,) = envelope["errors"]
    assert error["code"] == "usage"
    assert "invalid arch name '../../etc'" in error["message"]


def test_hostile_findings_of_validate_keep_their_specific_hint(
    sglx: CliRunner, tmp_path: Path
) -> None:
    bomb = tmp_path / "arch.yaml"
    bomb.write_text("arch: bomb\n" + billion_laughs(5))
    code, out, err = sglx("arch", "validate", str(bomb))
    assert code == 1
    assert "finding [invalid_profile]" in out
    assert f"aliases expand to more than {MAX_ALIAS_NODES} nodes" in out
    assert "hint: write the repeated values out" in out
    assert "Traceback" not in err
