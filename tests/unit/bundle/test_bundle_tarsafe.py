"""A bundle that arrives as one tar is checked member by member before anything is written:
each malicious member is refused by name, with exit 1 and nothing extracted."""

from __future__ import annotations

import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.bundles import member, write_tar

from sglx.bundle.tarsafe import check_tar, extract_tar
from sglx_core.errors import SglxError

CliRunner = Callable[..., tuple[int, str, str]]

MALICIOUS = [
    ([member("b/x"), member("/etc/evil")], "member '/etc/evil' has an absolute path"),
    ([member("b/x"), member("b/../../evil")], "member 'b/../../evil' has '..' in its path"),
    (
        [member("b/x"), member("b/link", "symlink", "../../etc/passwd")],
        "member 'b/link' is a symlink pointing outside (../../etc/passwd)",
    ),
    (
        [member("b/x"), member("b/abs", "symlink", "/etc/passwd")],
        "member 'b/abs' is a symlink pointing outside (/etc/passwd)",
    ),
    (
        [member("b/x"), member("b/hard", "hardlink", "../outside")],
        "member 'b/hard' is a hardlink pointing outside (../outside)",
    ),
    ([member("b/x"), member("b/dev", "chardev")], "member 'b/dev' is a device file"),
    ([member("b/x"), member("b/fifo", "fifo")], "member 'b/fifo' is a FIFO"),
    ([member("b/x"), member("b/x")], "member 'b/x' appears twice"),
    ([member("b/x"), member("b/in", "symlink", "x")], "is a symlink, and bundles hold no links"),
]


@pytest.mark.parametrize(("members", "words"), MALICIOUS)
def test_malicious_members_are_refused_before_anything_is_written(
    sglx: CliRunner, tmp_path: Path, members: list[tarfile.TarInfo], words: str
) -> None:
    tar = write_tar(tmp_path / "bundle.tar", members)
    code, out, err = sglx("bundle", "verify", str(tar), "--no-scan")
    assert code == 1
    assert words in out
    assert "nothing was extracted" in out
    assert "Traceback" not in out + err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle.tar"]


def test_install_refuses_a_malicious_tar_and_installs_nothing(
    sglx: CliRunner, tmp_path: Path
) -> None:
    tar = write_tar(tmp_path / "bundle.tar", [member("b/x"), member("/etc/evil")])
    state = tmp_path / "state"
    code, out, err = sglx("bundle", "install", str(tar), "--state", str(state))
    assert code == 1
    assert "member '/etc/evil' has an absolute path" in out
    assert "Traceback" not in out + err
    assert not state.exists()


def test_a_tar_with_several_top_folders_is_not_a_bundle(tmp_path: Path) -> None:
    tar = write_tar(tmp_path / "t.tar", [member("a/x"), member("b/y")])
    with pytest.raises(SglxError, match="holds 2 top-level entries, not one bundle folder"):
        check_tar(tar)


def test_a_clean_tar_extracts_its_one_folder(tmp_path: Path) -> None:
    tar = write_tar(tmp_path / "t.tar", [member("b", "dir"), member("b/x"), member("b/d/y")])
    dest = tmp_path / "out"
    dest.mkdir()
    folder = extract_tar(tar, dest)
    assert folder == dest / "b"
    assert (folder / "d" / "y").read_bytes() == b"x"
    assert [p.name for p in dest.iterdir()] == ["b"]


def test_something_that_is_not_a_tar_is_named(sglx: CliRunner, tmp_path: Path) -> None:
    bogus = tmp_path / "bundle.tar"
    bogus.write_bytes(b"not a tar at all" * 100)
    code, out, err = sglx("bundle", "verify", str(bogus), "--no-scan")
    assert code == 2
    assert f"{bogus} is not a readable tar" in err
    assert "Traceback" not in out + err
