"""The one reader of untrusted data (sglx_core.untrusted): numbers no real document holds are
refused as an SglxError naming the input (issue 37 item 7: a 4,300-digit integer raised a bare
ValueError in 18 readers, and a 400-digit log-probability an OverflowError in the gate), and no
module parses JSON outside it except the call sites listed here, each with why its input is
trusted."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglx_core.errors import SglxError
from sglx_core.untrusted import MAX_INT_DIGITS, parse_json

ROOT = Path(__file__).resolve().parents[3]
SOURCES = ("scripts", "plugin", "runtime", "hostchecks")


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"size": ' + "9" * 5000 + "}", "an integer of 5000 digits"),
        ("[-" + "1" * (MAX_INT_DIGITS + 1) + "]", f"an integer of {MAX_INT_DIGITS + 1} digits"),
        ('{"logprob": -1' + "0" * 400 + ".5}", "overflows a float"),
        ('{"x": 1e400}', "the number 1e400, which overflows a float"),
    ],
)
def test_numbers_no_real_document_holds_are_refused_naming_the_input(text: str, said: str) -> None:
    with pytest.raises(SglxError, match=re.escape(said)) as caught:
        parse_json(text, path=Path("bundle.json"), what="bundle manifest")
    assert caught.value.code == "corrupt"
    assert caught.value.message.startswith("bundle.json: the bundle manifest holds ")


def test_real_numbers_still_read() -> None:
    document = parse_json(
        '{"size": 18446744073709551615, "lp": -1.5e-300, "n": -0}', path=Path("x"), what="x"
    )
    assert document == {"size": 2**64 - 1, "lp": -1.5e-300, "n": 0}


@settings(max_examples=300, deadline=None, database=None)
@given(st.binary(max_size=512) | st.text(max_size=512).map(str.encode))
def test_any_bytes_read_or_are_refused_cleanly(raw: bytes) -> None:
    try:
        parse_json(raw, path=Path("input.json"), what="input")
    except SglxError as error:
        assert error.message.startswith("input.json: ")


@settings(max_examples=200, deadline=None, database=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False,
       allow_infinity=False) | st.text(max_size=8), lambda inner: st.lists(inner, max_size=4)
       | st.dictionaries(st.text(max_size=4), inner, max_size=4), max_leaves=30))  # fmt: skip
def test_documents_within_the_bounds_read_back_as_written(document: object) -> None:
    import json

    text = json.dumps(document)
    try:
        assert parse_json(text, path=Path("x"), what="x") == document
    except SglxError as error:  # only for what the bounds refuse
        assert "digits" in error.message or "nested" in error.message


# Call sites that parse JSON without the untrusted reader, each with why its input is sglx's own.
# A new one fails the test below until it reads through sglx_core.untrusted or is listed here.
TRUSTED_JSON = {
    "scripts/sglx/bundle/layers.py": "the engine's layer metadata on this host",
    "scripts/sglx/image/prune.py": "sglx's own build records",
    "scripts/sglx/image/build.py": "the build's own probe, run in the image it just built",
    "scripts/sglx/wheels/resolve.py": "pip's own --report of this resolution",
    "scripts/sglx/wheels/lockfile.py": "the lock's header, checked against its schema after",
    "scripts/sglx/verified_cache.py": "sglx's own cache of verified hashes, root-owned",
    "scripts/sglx_core/serving/flags.py": "sglang's option table shipped in sglx's own wheel",
    "runtime/sglx_runtime/preflight/protocol.py": "preflight's own child process, line by line",
    "runtime/sglx_runtime/preflight/base_check.py": "the report the image build wrote",
    "runtime/sglx_runtime/preflight/child.py": "the spec its parent process hands it",
    "plugin/sglx_platform/profiling.py": "torch profiler's own trace summary",
    "runtime/sglx_runtime/warm_cache.py": "the warm-up child's own last line",
    "runtime/sglx_runtime/collective_smoke/rank.py": "the collective's own TCPStore (its ranks)",
    "runtime/sglx_runtime/serve.py": "sglx-serve's own state files",
    "hostchecks/probes.py": "sglx's own probes' output on the checked host",
    "hostchecks/test_preflight.py": "the image's preflight --json",
    "hostchecks/test_acceptance.py": "the image's own gate tools' --json",
}


def test_json_is_parsed_only_through_the_untrusted_reader_or_a_listed_trusted_source() -> None:
    found: set[str] = set()
    for top in SOURCES:
        for path in (ROOT / top).rglob("*.py"):
            text = path.read_text()
            if re.search(r"\bjson\.loads?\(", text):
                found.add(str(path.relative_to(ROOT)))
    found.discard("scripts/sglx_core/untrusted.py")
    unlisted = sorted(found - TRUSTED_JSON.keys())
    assert not unlisted, (
        f"{unlisted} parse JSON without sglx_core.untrusted: read it with parse_json/read_json, "
        "or list the file in TRUSTED_JSON with why its input is sglx's own"
    )
    assert not sorted(TRUSTED_JSON.keys() - found), "a listed file no longer parses JSON: unlist it"


def _tar_with_links(path: Path, links: dict[str, str], files: dict[str, bytes]) -> None:
    import io
    import tarfile

    with tarfile.open(path, "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in links.items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tar.addfile(info)


@pytest.mark.parametrize(
    "links",
    [
        {"manifest.json": "manifest.json"},  # itself
        {"manifest.json": "a.json", "a.json": "manifest.json"},  # a loop of two
        {"manifest.json": "../../etc/passwd"},  # out of the archive
        {"manifest.json": "l0", **{f"l{i}": f"l{i + 1}" for i in range(60)}},  # too long a chain
    ],
    ids=["itself", "loop", "outside", "chain"],
)
def test_a_tar_member_that_links_round_or_out_is_no_file(
    tmp_path: Path, links: dict[str, str]
) -> None:
    """Issue 37 item 10: tarfile's extractfile follows links recursively, so a manifest.json
    linking to itself raised RecursionError in verify, install, scan --bundle and inspect."""
    import tarfile

    from sglx.bundle.image_archive import _json
    from sglx.scan.archive import _json_member
    from sglx_core.untrusted import tar_member_bytes

    path = tmp_path / "image.tar"
    _tar_with_links(path, links, {"l60": b"[]"} if "l0" in links else {})
    with tarfile.open(path) as tar:
        assert tar_member_bytes(tar, "manifest.json", max_bytes=1 << 20) is None
        with pytest.raises(SglxError, match=r"manifest\.json"):
            _json(tar, "manifest.json", "image/image.tar")
        with pytest.raises(SglxError, match=r"manifest\.json"):
            _json_member(tar, "manifest.json", path, "'manifest.json' member")


def test_a_tar_member_reached_through_links_inside_the_archive_reads(tmp_path: Path) -> None:
    import tarfile

    from sglx_core.untrusted import tar_member_bytes

    path = tmp_path / "image.tar"
    _tar_with_links(path, {"manifest.json": "sub/../real.json"}, {"real.json": b"[1]"})
    with tarfile.open(path) as tar:
        assert tar_member_bytes(tar, "manifest.json", max_bytes=10) == b"[1]"
