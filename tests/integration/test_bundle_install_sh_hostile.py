"""`install.sh` against hostile bundles (issue 21, items 2, 4, 10, 11), run with this machine's
sh, coreutils and GNU tar in `--check` mode (no engine): paths that leave the bundle, FIFOs and
devices where files belong, an image reference that is a command, names that forge lines, and
the two tars that Python's tarfile and GNU tar read differently. Each is refused with its words
and exit code, without hanging, and nothing is written outside the bundle."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest
from helpers.bundles import SCAN_OK, hand_bundle

from sglx.bundle import install_sh
from sglx_core.errors import SglxError
from sglx_core.profile import load_profile

CHUNKS = ("image/image.tar.000", "image/image.tar.001")
ID = "sha256:" + "0" * 64


def script(image_ref: str = "fixture-scan:test") -> bytes:
    return install_sh.render(
        load_profile("cpu"), version="test", image_ref=image_ref, image_id=ID, chunks=CHUNKS,
        weights_path=None,
    ).encode()  # fmt: skip


def make_bundle(where: Path, name: str = "bundle", **scan: Any) -> Path:
    """A bundle with a real install.sh; `scan`: hand_bundle's (a scan report, or none)."""
    where.mkdir(parents=True, exist_ok=True)
    archive = where / "image.tar"
    archive.write_bytes(os.urandom(8192))  # two chunks of 4 KiB
    files = {"install.sh": script(), "meta/versions.json": b"{}\n", **scan.pop("files", {})}
    bundle = hand_bundle(where / name, archive, files, chunk_size=4096, **scan)
    archive.unlink()
    return bundle


def add_sum(bundle: Path, line_path: str, data: bytes) -> None:
    """A SHA256SUMS line for `line_path`, its hash made consistent with `data`."""
    sums = bundle / "SHA256SUMS"
    sums.write_text(sums.read_text() + f"{hashlib.sha256(data).hexdigest()}  {line_path}\n")


def run(script: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`sh SCRIPT ARGS` (the timeout turns a hang into a failure)."""
    return subprocess.run(
        ["sh", str(script), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def check(bundle: Path) -> subprocess.CompletedProcess[str]:
    return run(bundle / "install.sh", "--check")


def tree(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


def test_a_clean_bundle_passes_the_check(tmp_path: Path) -> None:
    done = check(make_bundle(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "install.sh: all files match" in done.stderr


FINDINGS_REPORT = SCAN_OK.replace(b'"status": "ok"', b'"status": "findings"')


@pytest.mark.parametrize(
    ("scan", "words"),
    [
        ({"scanned": False}, "not scanned: the bundle carries no meta/scan.json, and install.sh"),
        ({"files": {"meta/scan.json": FINDINGS_REPORT}}, "scan report (meta/scan.json) has find"),
        ({"files": {"meta/scan.json": b'{"status": "ok"}'}}, "or is not a scan report"),
    ],
    ids=["none", "findings", "not-a-report"],
)
def test_an_unscanned_bundle_is_refused_unless_the_operator_accepts_it(
    tmp_path: Path, scan: dict[str, Any], words: str
) -> None:
    """Issue 37 item 4: a bundle without a scan report (made with --no-scan), or whose report
    has findings, is refused after the files check; --no-scan or SGLX_NO_SCAN=1 accepts it."""
    bundle = make_bundle(tmp_path, **scan)
    done = check(bundle)
    assert done.returncode == 1, done.stderr
    assert "install.sh: all files match" in done.stderr
    assert words in " ".join(done.stderr.split()), done.stderr
    assert "--no-scan (or set SGLX_NO_SCAN=1)" in " ".join(done.stderr.split())
    assert run(bundle / "install.sh", "--check", "--no-scan").returncode == 0
    accepted = subprocess.run(
        ["sh", str(bundle / "install.sh"), "--check"], capture_output=True, text=True,
        timeout=60, check=False, env={**os.environ, "SGLX_NO_SCAN": "1"},
    )  # fmt: skip
    assert accepted.returncode == 0, accepted.stderr


@pytest.mark.parametrize(
    "line_path",
    ["../../escaped.txt", "/dev/zero", "../../../../proc/self/environ", "meta/../x", "./x",
     ".hidden", "a b"],
)  # fmt: skip
def test_a_sums_line_outside_the_bundle_is_refused_before_any_file_is_read(
    tmp_path: Path, line_path: str
) -> None:
    """Item 2 and 11: the same path rule as bundle.json; /dev/zero and /proc are never read."""
    bundle = make_bundle(tmp_path / "site" / "a")
    escaped = tmp_path / "site" / "escaped.txt"
    escaped.write_text("outside\n")
    add_sum(bundle, line_path, escaped.read_bytes())
    before = tree(tmp_path)
    done = check(bundle)
    assert done.returncode == 1, done.stderr
    assert "SHA256SUMS has a line not `SHA256  PATH` with a plain bundle path" in done.stderr
    assert "FAILED" not in done.stderr and "checking every file" not in done.stderr
    assert tree(tmp_path) == before


def test_too_long_or_too_deep_or_twice_listed_paths_are_refused(tmp_path: Path) -> None:
    for n, (path, words) in enumerate(
        [("a/" * 16 + "x", "deeper than 16 levels"), ("x" * 401, "longer than 400"),
         ("meta/versions.json", "lists meta/versions.json twice")]
    ):  # fmt: skip
        bundle = make_bundle(tmp_path / str(n))
        add_sum(bundle, path, b"")
        done = check(bundle)
        assert done.returncode == 1, done.stderr
        assert words in done.stderr


def test_a_fifo_or_a_link_in_place_of_a_listed_file_is_refused_without_hanging(
    tmp_path: Path,
) -> None:
    """Item 11: the type is tested before sha256sum opens anything (the timeout would fire)."""
    bundle = make_bundle(tmp_path / "fifo")
    (bundle / CHUNKS[1]).unlink()
    os.mkfifo(bundle / CHUNKS[1])
    done = check(bundle)
    assert done.returncode == 1, done.stderr
    assert f"{CHUNKS[1]} is not a regular file (a FIFO, device or socket)" in done.stderr

    bundle = make_bundle(tmp_path / "link")
    target = tmp_path / "elsewhere"
    target.write_bytes((bundle / CHUNKS[0]).read_bytes())
    (bundle / CHUNKS[0]).unlink()
    (bundle / CHUNKS[0]).symlink_to(target)
    done = check(bundle)
    assert done.returncode == 1, done.stderr
    assert f"{CHUNKS[0]} is a symbolic link" in done.stderr

    bundle = make_bundle(tmp_path / "sums")
    (bundle / "SHA256SUMS").unlink()
    os.mkfifo(bundle / "SHA256SUMS")
    done = check(bundle)
    assert (done.returncode, "SHA256SUMS is missing or not a regular file") == (
        1,
        done.stderr.split("error: ", 1)[1].splitlines()[0],
    )


def test_an_unlisted_name_with_control_characters_cannot_forge_a_line(tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path)
    (bundle / "x\x1b[32m ok").write_text("")
    done = check(bundle)
    assert done.returncode == 1, done.stderr
    assert "files not listed in SHA256SUMS: 'x?[32m ok'" in done.stderr
    assert "\x1b" not in done.stderr

    bundle = make_bundle(tmp_path / "nl")
    (bundle / "x\ninstall.sh: all files match").write_text("")
    done = check(bundle)
    assert done.returncode == 1, done.stderr
    assert "a name in the bundle folder cannot be read back: x" in done.stderr
    assert "all files match" not in done.stderr


@pytest.mark.parametrize("ref", ["probe/tiny:1; touch /tmp/owned", "a:1\n\x1b[32mok", "A/$(id)"])
def test_an_image_reference_that_is_not_one_is_refused_at_create(ref: str) -> None:
    """Item 4: the reference is checked before it is written into install.sh."""
    with pytest.raises(SglxError) as caught:
        script(ref)
    assert "image reference" in caught.value.message


def test_install_sh_checks_the_reference_itself_and_quotes_what_it_prints(tmp_path: Path) -> None:
    """Item 4: an install.sh edited to name a command as its image (and re-sealed) refuses to
    run, and prints the value single-quoted with the control characters shown as '?'."""
    bundle = make_bundle(tmp_path)
    sh = bundle / "install.sh"
    hostile = "probe/tiny:1; touch owned\n\x1b[32m"
    text = sh.read_text().replace("image_ref=fixture-scan:test", f"image_ref='{hostile}'")
    sh.write_text(text)
    sums = bundle / "SHA256SUMS"
    new_sha = hashlib.sha256(text.encode()).hexdigest()
    sums.write_text(
        "".join(
            f"{new_sha}  install.sh\n" if line.endswith("  install.sh") else line + "\n"
            for line in sums.read_text().splitlines()
        )
    )
    done = check(bundle)
    assert done.returncode == 1, done.stderr
    assert "names the image 'probe/tiny:1; touch owned??[32m'" in done.stderr
    assert not (bundle / "owned").exists() and "\x1b" not in done.stderr


def test_the_printed_run_line_is_quoted_for_the_shell() -> None:
    text = script().decode()
    assert "printf '%s\\n' \"$run_line\"" in text
    assert "echo $" not in text


# ---------------------------------------------------------------------------------------------
# a bundle tar, checked as GNU tar reads it
# ---------------------------------------------------------------------------------------------


def member_bytes(info: tarfile.TarInfo, data: bytes = b"") -> bytes:
    out = info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape") + data
    return out + b"\0" * (-len(data) % 512)


def bundle_tar_members(bundle: Path) -> list[bytes]:
    """The bundle's members in the order `bundle create --tar` writes them."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.add(bundle, arcname=bundle.name, recursive=True)
    buffer.seek(0)
    blocks = []
    with tarfile.open(fileobj=buffer, mode="r:") as tar:
        for info in tar:
            handle = tar.extractfile(info)
            blocks.append(member_bytes(info, handle.read() if handle else b""))
    return blocks


def finish(blocks: list[bytes]) -> bytes:
    raw = b"".join(blocks) + b"\0" * 1024
    return raw + b"\0" * (-len(raw) % 10240)


def long_name_then_pax_path(bundle: Path) -> bytes:
    """A GNU long-name header, then a pax header whose path leaves the bundle folder, on one
    member: Python's tarfile reads the long name, GNU tar the pax path (`../outside/...` seen
    from the bundle folder)."""
    data = b"pwned\n"
    safe = f"{bundle.name}/meta/notes.txt"
    long_name = tarfile.TarInfo._create_gnu_long_header(  # type: ignore[attr-defined]
        safe, tarfile.GNUTYPE_LONGNAME, "utf-8", "strict"
    )
    pax = tarfile.TarInfo._create_pax_generic_header(  # type: ignore[attr-defined]
        {"path": "outside/pwned.txt"}, tarfile.XHDTYPE, "utf-8"
    )
    info = tarfile.TarInfo(f"{bundle.name}/short")
    info.size = len(data)
    hostile = long_name + pax + info.tobuf(tarfile.USTAR_FORMAT, "utf-8", "strict") + data
    hostile += b"\0" * (-len(hostile) % 512)
    return finish([*bundle_tar_members(bundle), hostile])


def hidden_after_a_corrupt_header(bundle: Path) -> bytes:
    """After the last member, a header that fails its checksum, then a member: tarfile stops
    at the bad header, GNU tar skips to the next one and extracts it."""
    corrupt = bytearray(member_bytes(tarfile.TarInfo(f"{bundle.name}/junk"))[:512])
    corrupt[148:156] = b"0000000\0"  # a checksum that cannot match
    hidden = tarfile.TarInfo("hidden.sh")
    hidden.size = 10
    return finish(
        [*bundle_tar_members(bundle), bytes(corrupt), member_bytes(hidden, b"echo gotcha")[:1024]]
    )


def gnu_extract(raw: bytes, where: Path) -> set[str]:
    """What GNU tar writes from `raw` into an empty folder `where` (proof of the construction)."""
    where.mkdir()
    (where / "t.tar").write_bytes(raw)
    subprocess.run(["tar", "-xf", "t.tar"], cwd=where, capture_output=True, check=False)
    return tree(where) - {"t.tar"}


def tar_site(tmp_path: Path) -> tuple[Path, Path]:
    """A site folder holding `sglx-cpu.install.sh` (as `bundle create --tar` writes it) and the
    bundle it came from, in a separate source folder."""
    source = make_bundle(tmp_path / "src", name="sglx-cpu")
    site = tmp_path / "site"
    site.mkdir()
    shutil.copyfile(source / "install.sh", site / "sglx-cpu.install.sh")
    return source, site


def test_a_clean_tar_is_unpacked_through_gnu_tars_listing_and_checked(tmp_path: Path) -> None:
    source, site = tar_site(tmp_path)
    (site / "sglx-cpu.tar").write_bytes(finish(bundle_tar_members(source)))
    done = run(site / "sglx-cpu.install.sh", "--check", "sglx-cpu.tar", cwd=site)
    assert done.returncode == 0, done.stderr
    assert "all files match" in done.stderr
    assert f"unpacked and checked in {site}/sglx-cpu;" in done.stderr
    assert tree(site / "sglx-cpu") == tree(source)
    assert sorted(p.name for p in site.iterdir()) == [
        "sglx-cpu",
        "sglx-cpu.install.sh",
        "sglx-cpu.tar",
    ]

    again = run(site / "sglx-cpu.install.sh", "--check", "sglx-cpu.tar", cwd=site)
    assert again.returncode == 2
    assert f"{site}/sglx-cpu already exists; the tar would be unpacked there" in again.stderr


@pytest.mark.parametrize(
    ("build", "gnu_writes", "words"),
    [
        (long_name_then_pax_path, "outside/pwned.txt", "is not under the one bundle folder"),
        (hidden_after_a_corrupt_header, "hidden.sh", "GNU tar reports a problem reading it"),
    ],
)
def test_a_tar_that_gnu_tar_reads_differently_is_refused_and_nothing_is_written(
    tmp_path: Path, build: object, gnu_writes: str, words: str
) -> None:
    """Item 10: both constructions are built here, GNU tar is shown to write the member outside
    the bundle folder, and install.sh refuses the tar before unpacking anything."""
    source, site = tar_site(tmp_path)
    raw = build(source)  # type: ignore[operator]
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tar:
        python_view = {m.name for m in tar}
    assert all(name.startswith("sglx-cpu") for name in python_view)
    assert gnu_writes in gnu_extract(raw, tmp_path / "gnu")

    (site / "sglx-cpu.tar").write_bytes(raw)
    before = tree(tmp_path)
    done = run(site / "sglx-cpu.install.sh", "sglx-cpu.tar", cwd=site)
    assert done.returncode == 1, done.stderr
    assert words in done.stderr and "nothing was unpacked" in done.stderr
    assert "not written by `sglx bundle create --tar`" in done.stderr
    assert tree(tmp_path) == before


def test_a_tar_member_that_is_a_fifo_link_or_unlisted_file_is_refused(tmp_path: Path) -> None:
    source, site = tar_site(tmp_path)
    fifo = tarfile.TarInfo("sglx-cpu/image/pipe")
    fifo.type = tarfile.FIFOTYPE
    link = tarfile.TarInfo("sglx-cpu/meta/link")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/shadow"
    extra = tarfile.TarInfo("sglx-cpu/extra.txt")
    extra.size = 1
    for n, (blocks, words) in enumerate(
        [([member_bytes(fifo)], "sglx-cpu/image/pipe is not a regular file or folder"),
         ([member_bytes(link)], "sglx-cpu/meta/link is not a regular file or folder"),
         ([member_bytes(extra, b"x")], "exactly those its SHA256SUMS lists (sglx-cpu/extra.txt)")]
    ):  # fmt: skip
        tar = site / f"t{n}.tar"
        tar.write_bytes(finish([*bundle_tar_members(source), *blocks]))
        before = tree(tmp_path)
        done = run(site / "sglx-cpu.install.sh", "--check", tar.name, cwd=site)
        assert done.returncode == 1, done.stderr
        assert words in done.stderr
        assert tree(tmp_path) == before


def test_a_tar_whose_files_fail_their_hashes_is_removed_again(tmp_path: Path) -> None:
    source, site = tar_site(tmp_path)
    (source / CHUNKS[0]).write_bytes(b"damaged")
    (site / "sglx-cpu.tar").write_bytes(finish(bundle_tar_members(source)))
    done = run(site / "sglx-cpu.install.sh", "--check", "sglx-cpu.tar", cwd=site)
    assert done.returncode == 1, done.stderr
    assert f"{CHUNKS[0]}: FAILED" in done.stderr
    assert sorted(p.name for p in site.iterdir()) == ["sglx-cpu.install.sh", "sglx-cpu.tar"]
