"""Tuned sets (sglx_core/tuned.py, `sglx tuned`): captured from the files a tuning run wrote,
checked for the arch at every step, refused when damaged or another arch's. The files keep the
formats the libraries write (helpers/tuned_files.py).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.tuned_files import (
    BF16_HEADER,
    BF16_ROW,
    BLOCKSCALE_HEADER,
    BLOCKSCALE_ROW,
    table,
    write_tuning_run,
)

from sglx_core import tuned
from sglx_core.errors import SglxError
from sglx_core.profile import load_profile


@pytest.fixture
def tuning_run(tmp_path: Path) -> Path:
    return write_tuning_run(tmp_path / "tuning")


def capture(source: Path, out: Path, arch: str = "gfx942") -> tuple[tuned.TunedSet, list[str]]:
    return tuned.capture(
        source, out, load_profile(arch), captured_from=str(source), host="mi300x-07", sglx="t"
    )


def test_a_capture_keeps_the_tuned_files_with_their_facts_and_leaves_the_rest(
    tuning_run: Path, tmp_path: Path
) -> None:
    tuned_set, left = capture(tuning_run, tmp_path / "set")
    assert left == ["tune.log"]
    records = {r.name: r for r in tuned_set.manifest.files}
    assert {p.name for p in (tmp_path / "set").iterdir()} == {*records, tuned.MANIFEST}
    bf16 = records["bf16_tuned_gemm.csv"]
    assert (bf16.rule, bf16.rows) == ("aiter-bf16", 2)
    assert bf16.facts == {"cu_num": ["256", "304"], "gfx": ["gfx942", "gfx950"]}
    assert records["a8w8_blockscale_tuned_gemm.csv"].facts == {"cu_num": ["304"]}
    op = records["tunableop_results0.csv"]
    assert (op.rule, op.rows, op.facts["validator:PT_VERSION"]) == ("tunableop", 2, ["2.9.1"])
    assert records["hipblaslt_tuning.txt"].facts == {"git_version": ["1a2b3c4d"]}
    assert tuned_set.manifest.provenance.host == "mi300x-07"
    # The set reads back as written, and its digest names it.
    again = tuned.load(tmp_path / "set", load_profile("gfx942"))
    assert again.digest == tuned_set.digest and again.digest.startswith("sha256:")


def test_the_server_reads_each_file_through_its_librarys_variable(
    tuning_run: Path, tmp_path: Path
) -> None:
    profile = load_profile("gfx942")
    tuned_set, _ = capture(tuning_run, tmp_path / "set")
    env = tuned.server_env(tuned_set, "/etc/sglx/tuned", profile)
    assert env == {
        "AITER_CONFIG_GEMM_BF16": "/etc/sglx/tuned/bf16_tuned_gemm.csv",
        "AITER_CONFIG_GEMM_A8W8_BLOCKSCALE": "/etc/sglx/tuned/a8w8_blockscale_tuned_gemm.csv",
        # one name for every device: torch puts the ordinal in place of %d
        "PYTORCH_TUNABLEOP_FILENAME": "/etc/sglx/tuned/tunableop_results%d.csv",
        "PYTORCH_TUNABLEOP_ENABLED": "1",
        "PYTORCH_TUNABLEOP_TUNING": "0",
        "HIPBLASLT_TUNING_OVERRIDE_FILE": "/etc/sglx/tuned/hipblaslt_tuning.txt",
    }


def test_another_archs_tables_are_refused_naming_the_file_and_the_cards(
    tmp_path: Path,
) -> None:
    mi355 = tmp_path / "mi355x"
    mi355.mkdir()
    (mi355 / "bf16_tuned_gemm.csv").write_text(table(BF16_HEADER, BF16_ROW, ("gfx950", 256)))
    (mi355 / "a8w8_blockscale_tuned_gemm.csv").write_text(
        table(BLOCKSCALE_HEADER, BLOCKSCALE_ROW, ("", 256))
    )
    with pytest.raises(SglxError) as refused:
        capture(mi355, tmp_path / "set")
    assert refused.value.code == "wrong_arch"
    said = refused.value.message
    assert "a8w8_blockscale_tuned_gemm.csv: tuned for other cards (cu_num 256)" in said
    assert "none of them gfx942 (gfx942, 80, 228, 304 compute units)" in said
    assert not (tmp_path / "set").exists()
    (mi355 / "a8w8_blockscale_tuned_gemm.csv").unlink()
    with pytest.raises(SglxError, match=r"bf16_tuned_gemm.csv: tuned for other cards \(gfx gfx950"):
        capture(mi355, tmp_path / "set")
    (mi355 / "a8w8_blockscale_tuned_gemm.csv").write_text(
        table(BLOCKSCALE_HEADER, BLOCKSCALE_ROW, ("", 256))
    )
    # The same tables are the gfx950 profile's: a legacy table's cu_num 256 is gfx950's.
    tuned_set, _ = capture(mi355, tmp_path / "set950", arch="gfx950")
    assert len(tuned_set.manifest.files) == 2


def test_a_set_is_refused_when_it_changed_after_capture(tuning_run: Path, tmp_path: Path) -> None:
    profile = load_profile("gfx942")
    capture(tuning_run, tmp_path / "set")
    cases: list[tuple[str, Callable[[Path], Any], str]] = [
        ("edited", lambda f: _append(f / "hipblaslt_tuning.txt"), "differs from its manifest"),
        ("extra", lambda f: (f / "tuned_fmoe.csv").write_text("x"), "extra ['tuned_fmoe.csv']"),
        ("link", lambda f: _relink(f / "hipblaslt_tuning.txt"), "is a symlink"),
        ("arch", lambda f: _manifest_arch(f, "gfx950"), "captured for gfx950, not gfx942"),
    ]
    for name, damage, said in cases:
        work = tmp_path / name
        shutil.copytree(tmp_path / "set", work)
        damage(work)
        with pytest.raises(SglxError) as refused:
            tuned.load(work, profile)
        assert said in refused.value.message, (name, refused.value.message)


def _append(path: Path) -> None:
    path.write_text(path.read_text() + "N,N,1,1,1,1,bf16_r,bf16_r,bf16_r,f32_r,1\n")


def _relink(path: Path) -> None:
    outside = path.parent.parent / f"{path.parent.name}-{path.name}"
    path.rename(outside)
    path.symlink_to(outside)


def _manifest_arch(folder: Path, arch: str) -> None:
    manifest = json.loads((folder / tuned.MANIFEST).read_text())
    (folder / tuned.MANIFEST).write_text(json.dumps({**manifest, "arch": arch}))


@pytest.mark.parametrize(
    ("name", "text", "said"),
    [
        ("bf16_tuned_gemm.csv", "M,N,K\n1,2,3\n", "has no cu_num column"),
        ("bf16_tuned_gemm.csv", BF16_HEADER + "\n" + "gfx942,304\n", "line 2 has 2 fields"),
        ("bf16_tuned_gemm.csv", "cu_num,M\nmany,1\n", "cu_num is 'many', not a number"),
        ("bf16_tuned_gemm.csv", "cu_num" + ",x" * 100 + "\n", "has 101 fields"),
        ("bf16_tuned_gemm.csv", "", "is empty"),
        ("tunableop_results0.csv", "Validator,PT_VERSION,2.9.1\nop,p,s\n", "ROCM_VERSION"),
        ("tunableop_results0.csv", "Validator,PT_VERSION\n", "a Validator line has 3 fields"),
        ("hipblaslt_tuning.txt", "N,T,1,4096\n", "does not start with a 'Git Version: ' line"),
        ("hipblaslt_tuning.txt", "Git Version: x\nN,T,1\n", "line 2 has 3 fields"),
    ],
)
def test_a_file_that_is_not_what_its_name_says_is_refused(
    tmp_path: Path, name: str, text: str, said: str
) -> None:
    (tmp_path / name).write_text(text)
    with pytest.raises(SglxError) as refused:
        tuned.check_file(tmp_path / name, load_profile("gfx942"))
    assert said in refused.value.message
    assert refused.value.code == "corrupt"


def test_unreadable_or_oversized_input_is_bounded(tmp_path: Path) -> None:
    profile = load_profile("gfx942")
    small = profile.model_copy(
        update={"tuning": profile.tuning.model_copy(update={"max_file_bytes": 64})}
    )
    (tmp_path / "bf16_tuned_gemm.csv").write_text(table(BF16_HEADER, BF16_ROW, ("gfx942", 304)))
    with pytest.raises(SglxError, match="larger than 64 B"):
        tuned.check_file(tmp_path / "bf16_tuned_gemm.csv", small)
    (tmp_path / "bf16_tuned_gemm.csv").write_bytes(b"cu_num\n\xff\xfe\n")
    with pytest.raises(SglxError, match="is not UTF-8 text"):
        tuned.check_file(tmp_path / "bf16_tuned_gemm.csv", profile)
    (tmp_path / "model.safetensors").write_bytes(b"x")
    with pytest.raises(SglxError, match="is no tuned-configuration file the gfx942 profile"):
        tuned.check_file(tmp_path / "model.safetensors", profile)
    os.mkfifo(tmp_path / "tuned_fmoe.csv")
    with pytest.raises(SglxError, match="a FIFO"):
        tuned.check_file(tmp_path / "tuned_fmoe.csv", profile)


def test_an_arch_without_rules_takes_no_set(tuning_run: Path, tmp_path: Path) -> None:
    with pytest.raises(SglxError, match="holds no tuned-configuration file the cpu profile"):
        capture(tuning_run, tmp_path / "set", arch="cpu")


def test_a_host_of_other_cards_of_the_arch_is_told_which_tables_it_will_not_use(
    tuning_run: Path, tmp_path: Path
) -> None:
    tuned_set, _ = capture(tuning_run, tmp_path / "set")
    assert tuned.unused_on(tuned_set, [304]) == []
    unused = tuned.unused_on(tuned_set, [80])  # an MI308X
    assert unused == [
        "a8w8_blockscale_tuned_gemm.csv: rows for 304 compute units, none for this host's 80",
        "bf16_tuned_gemm.csv: rows for 256, 304 compute units, none for this host's 80",
    ]


def test_the_cli_captures_and_checks_with_a_table_and_json(
    tuning_run: Path, tmp_path: Path, sglx_json: Any
) -> None:
    code, out = sglx_json("tuned", "capture", "--from", str(tuning_run), "--out",
                          str(tmp_path / "set"), "--arch", "gfx942", "--host", "h1")  # fmt: skip
    assert code == 0, out
    assert out["data"]["left_behind"] == ["tune.log"]
    assert out["data"]["provenance"]["host"] == "h1"
    code, out = sglx_json("tuned", "check", str(tmp_path / "set"), "--arch", "gfx942")
    assert code == 0 and len(out["data"]["files"]) == 5
    code, out = sglx_json("tuned", "check", str(tmp_path / "set"), "--arch", "gfx950")
    assert code == 1
    assert out["findings"][0]["code"] == "wrong_arch"
    code, out = sglx_json("tuned", "capture", "--from", str(tuning_run), "--out",
                          str(tmp_path / "set"), "--arch", "gfx942")  # fmt: skip
    assert code == 2 and "exists" in out["errors"][0]["message"]


def test_a_containers_capture_folder_gives_only_its_own_regular_files(tmp_path: Path) -> None:
    """What the engine's archive of the capture folder holds (`tuned capture --container`):
    files directly in the folder are taken; links (even to a tuned file), nested folders,
    names that are not plain and files past the profile's bound are left out."""
    import io
    import tarfile

    from sglx.commands.tuned import _extract_top_files

    profile = load_profile("gfx942")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:

        def add(
            name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE, link: str = ""
        ) -> None:
            member = tarfile.TarInfo(name)
            member.type, member.linkname, member.size = kind, link, len(data)
            tar.addfile(member, io.BytesIO(data))

        add("tuning/bf16_tuned_gemm.csv", b"gfx,cu_num\n")
        add("tuning/nested/hipblaslt_tuning.txt", b"Git Version: x\n")
        add("tuning/link.csv", kind=tarfile.SYMTYPE, link="bf16_tuned_gemm.csv")
        add("tuning/hard.csv", kind=tarfile.LNKTYPE, link="tuning/bf16_tuned_gemm.csv")
        add("tuning/..", b"x")
        add("tuning/big.csv", b"x" * (profile.tuning.max_file_bytes + 1))
    _extract_top_files(buffer.getvalue(), tmp_path, profile)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == {
        "bf16_tuned_gemm.csv": b"gfx,cu_num\n"
    }
