"""Output paths whose parents do not exist are created without recursion, a few at most
(issue 37 item 13: about 1,000 missing parents raised RecursionError in `ansible vars --out`
and `bundle install --state`/`--weights-dir`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglx_core.errors import SglxError
from sglx_core.output_files import MAX_NEW_FOLDERS, make_folders


def test_a_few_missing_parents_are_created(tmp_path: Path) -> None:
    folder = tmp_path.joinpath(*["a"] * 5)
    make_folders(folder)
    assert folder.is_dir()
    make_folders(folder)  # already there: nothing to do


def test_a_thousand_missing_parents_are_refused_naming_the_path(tmp_path: Path) -> None:
    folder = tmp_path.joinpath(*["d"] * 1000)
    with pytest.raises(SglxError, match=f"more than {MAX_NEW_FOLDERS} of its parent folders"):
        make_folders(folder, label="--out")
    assert list(tmp_path.iterdir()) == []  # nothing half-made


def test_a_file_on_the_way_is_named(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    with pytest.raises(SglxError, match="is a file, not a folder"):
        make_folders(tmp_path / "f" / "sub")


def test_the_cli_refuses_cleanly(sglx, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    deep = tmp_path.joinpath(*["d"] * 1000)
    code, out, err = sglx("ansible", "vars", "--arch", "cpu", "--out", str(deep / "vars.yml"))
    assert code == 2, out + err
    assert f"more than {MAX_NEW_FOLDERS} of its parent folders do not exist" in err
    assert "Traceback" not in err and "bug in sglx" not in err
