"""Resolution like glibc's loader, on gcc-built fixtures.

Tests on fixtures under tmp_path scanned with root `/` also run the system loader (`ldd`) on the
same files and require the same answer; tests of a separate root (re-rooted links, the root's
own ld.so.conf and system directories) cannot, and assert the expected paths.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_scan_support import ElfFactory, ldd, needs_gcc, relink, resolved, scan

pytestmark = needs_gcc
ROOT = Path("/")


@pytest.fixture
def cc(tmp_path: Path) -> ElfFactory:
    return ElfFactory(tmp_path / "build")


def agree_with_ldd(
    tree: Path, *files: Path, ldlp: str | None = None
) -> dict[Path, dict[str, str | None]]:
    """Scan `tree` with root / and check every file's answer against ldd's."""
    report = scan(ROOT, str(tree), ldlp=(ldlp,) if ldlp else ())
    answers = {}
    for file in files:
        ours = resolved(report, ROOT, file)
        theirs = ldd(file, ldlp)
        assert theirs is not None, f"ldd refused {file}"
        for name, path in theirs.items():
            assert ours.get(name, "absent") == path, f"{file.name}: {name}"
        answers[file] = ours
    return answers


# -- root /: the same answers as the system loader ------------------------------------------------


def test_rpath_is_inherited_but_runpath_is_not(cc: ElfFactory, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    leaf = cc.lib(tree / "private/libleaf.so.1")
    mid = cc.lib(tree / "private/libmid.so.1", needs=[leaf])
    with_rpath = cc.exe(tree / "app-rpath", needs=[mid], rpath="$ORIGIN/private")
    with_runpath = cc.exe(tree / "app-runpath", needs=[mid], runpath="$ORIGIN/private")
    answers = agree_with_ldd(tree, with_rpath, with_runpath)
    assert answers[with_rpath]["libleaf.so.1"] == str(leaf)
    assert answers[with_runpath]["libmid.so.1"] == str(mid)
    assert answers[with_runpath]["libleaf.so.1"] is None


def test_ld_library_path_comes_after_rpath_and_before_runpath(
    cc: ElfFactory, tmp_path: Path
) -> None:
    tree = tmp_path / "tree"
    dups = {d: cc.lib(tree / d / "libdup.so.1") for d in ("a", "b", "c")}
    via_rpath = cc.exe(tree / "app-rpath", needs=[dups["a"]], rpath="$ORIGIN/a")
    via_runpath = cc.exe(tree / "app-runpath", needs=[dups["b"]], runpath="$ORIGIN/b")
    answers = agree_with_ldd(tree, via_rpath, via_runpath, ldlp=str(tree / "c"))
    assert answers[via_rpath]["libdup.so.1"] == str(dups["a"])
    assert answers[via_runpath]["libdup.so.1"] == str(dups["c"])


def test_origin_is_where_a_library_was_found_not_where_its_link_points(
    cc: ElfFactory, tmp_path: Path
) -> None:
    tree = tmp_path / "tree"
    side = cc.lib(tree / "links/side/libside.so.1")
    real = cc.lib(
        tree / "real/libchain.so.1.2.3", "libchain.so.1", needs=[side], runpath="$ORIGIN/side"
    )
    relink(tree / "links/libchain.so.1.2", "../real/libchain.so.1.2.3")
    relink(tree / "links/libchain.so.1", "libchain.so.1.2")
    app = cc.exe(tree / "app", needs=[real], runpath="$ORIGIN/links")
    answers = agree_with_ldd(tree, app)
    assert answers[app]["libchain.so.1"] == str(real)
    assert answers[app]["libside.so.1"] == str(side)


def test_a_32_bit_library_does_not_satisfy_a_64_bit_one(cc: ElfFactory, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    cc.lib(tree / "first/libdual.so.1", m32=True, libc=False)
    wide = cc.lib(tree / "second/libdual.so.1")
    both = cc.exe(tree / "app-both", needs=[wide], runpath="$ORIGIN/first:$ORIGIN/second")
    only32 = cc.exe(tree / "app-only32", needs=[wide], runpath="$ORIGIN/first")
    answers = agree_with_ldd(tree, both, only32)
    assert answers[both]["libdual.so.1"] == str(wide)
    assert answers[only32]["libdual.so.1"] is None


def test_a_name_already_loaded_needs_no_search(cc: ElfFactory, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    b = cc.lib(tree / "dir/libb.so.1")
    a = cc.lib(tree / "dir/liba.so.1", needs=[b])
    app = cc.exe(tree / "app", needs=[b, a], runpath="$ORIGIN/dir")
    answers = agree_with_ldd(tree, app, a)
    assert answers[app]["libb.so.1"] == str(b)  # liba's own lookup found the loaded libb
    assert answers[a]["libb.so.1"] is None  # alone, liba has no path to it


def test_a_missing_dependency_is_reported_with_its_search_path(
    cc: ElfFactory, tmp_path: Path
) -> None:
    tree = tmp_path / "tree"
    gone = cc.lib(tmp_path / "elsewhere/libgone.so.1")  # linked against, not shipped
    app = cc.exe(tree / "app", needs=[gone], runpath="$ORIGIN/lib")
    agree_with_ldd(tree, app)
    report = scan(ROOT, str(tree))
    [missing] = report.unresolved
    assert (missing.file, missing.needed) == (str(app), "libgone.so.1")
    assert missing.searched[0] == f"{tree}/lib"
    assert "/usr/lib/x86_64-linux-gnu" in missing.searched
    assert missing.roots == (str(app),)


# -- a separate root: everything stays inside it ---------------------------------------------------


def debian_root(root: Path) -> Path:
    for d in ("lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu", "etc"):
        (root / d).mkdir(parents=True, exist_ok=True)
    return root


def test_absolute_links_are_re_rooted_and_never_reach_the_host(
    cc: ElfFactory, tmp_path: Path
) -> None:
    root = debian_root(tmp_path / "root")
    real = cc.lib(root / "opt/real/libreal.so.1", libc=False)
    relink(root / "usr/lib/x86_64-linux-gnu/libreal.so.1", "/opt/real/libreal.so.1")
    # Both would find the host's C library if followed outside the root.
    escape = cc.lib(tmp_path / "stub/libescape.so.1", libc=False)
    relink(
        root / "usr/lib/x86_64-linux-gnu/libescape.so.1",
        "../../../../../../lib/x86_64-linux-gnu/libc.so.6",
    )
    loop = cc.lib(tmp_path / "stub/libloop.so.1", libc=False)
    relink(root / "usr/lib/x86_64-linux-gnu/libloop.so.1", "libloop.so.1")
    app = cc.lib(root / "app/libapp.so", needs=[real, escape, loop])  # also needs libc.so.6
    report = scan(root)
    ours = resolved(report, root, app)
    assert ours["libreal.so.1"] == str(real)
    assert ours["libescape.so.1"] is None
    assert ours["libloop.so.1"] is None
    assert ours["libc.so.6"] is None
    assert {u.needed for u in report.unresolved} == {"libescape.so.1", "libloop.so.1", "libc.so.6"}


def test_the_roots_ld_so_conf_includes_and_dsts_are_used(cc: ElfFactory, tmp_path: Path) -> None:
    root = debian_root(tmp_path / "root")
    (root / "etc/ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n")
    (root / "etc/ld.so.conf.d").mkdir()
    (root / "etc/ld.so.conf.d/vendor.conf").write_text("# vendor runtime\n/opt/vendor/lib/\n")
    vendor = cc.lib(root / "opt/vendor/lib/libvendor.so.3", libc=False)
    by_lib = cc.lib(root / "opt/lib/x86_64-linux-gnu/libbylib.so.1", libc=False)
    by_platform = cc.lib(root / "opt/x86_64/libbyplat.so.1", libc=False)
    app = cc.lib(
        root / "app/libapp.so",
        needs=[vendor, by_lib, by_platform],
        runpath="/opt/$LIB:/opt/${PLATFORM}",
        libc=False,
    )
    ours = resolved(scan(root), root, app)
    assert ours == {
        "libvendor.so.3": str(vendor),
        "libbylib.so.1": str(by_lib),
        "libbyplat.so.1": str(by_platform),
    }


def test_nodefaultlib_skips_the_system_directories(cc: ElfFactory, tmp_path: Path) -> None:
    root = debian_root(tmp_path / "root")
    system = cc.lib(root / "usr/lib/x86_64-linux-gnu/libsys.so.1", libc=False)
    normal = cc.lib(root / "app/libnormal.so", needs=[system], libc=False)
    strict = cc.lib(root / "app/libstrict.so", needs=[system], libc=False, nodeflib=True)
    report = scan(root)
    assert resolved(report, root, normal)["libsys.so.1"] == str(system)
    assert resolved(report, root, strict)["libsys.so.1"] is None


def test_a_program_without_its_interpreter_is_reported(cc: ElfFactory, tmp_path: Path) -> None:
    root = debian_root(tmp_path / "root")
    program = cc.exe(root / "usr/bin/prog")
    report = scan(root, "/usr/bin")
    assert [(u.needed, u.interpreter) for u in report.unresolved] == [
        ("/lib64/ld-linux-x86-64.so.2", True),
        ("libc.so.6", False),
    ]
    # With the loader and the C library in the root, the program is complete.
    for name in ("ld-linux-x86-64.so.2", "libc.so.6"):
        shutil.copy(f"/lib/x86_64-linux-gnu/{name}", root / "lib/x86_64-linux-gnu" / name)
    relink(root / "lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")
    report = scan(root, "/usr/bin")
    assert report.unresolved == []
    assert resolved(report, root, program)["libc.so.6"] == str(
        (root / "lib/x86_64-linux-gnu/libc.so.6").resolve()
    )
