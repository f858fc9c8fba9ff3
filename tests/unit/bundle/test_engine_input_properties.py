"""Property-based tests of the readers issue 39's engines and issue 40's tuned sets and traces
brought (issue 37): the save stream of every store (`SaveFilter` on Docker 20.10's archive, the
OCI layout with plain, gzip and nested-index blobs, podman's archive), the index.json beside
Docker 25+'s manifest.json that `sglx base load` reads, what an engine's API says about itself
(`engine_from`), the tuned files of AITER, TunableOp and hipBLASLt and a tuned
set's manifest, and a profiler trace.

The property is the one of tests/unit/cli/test_hostile_input_properties.py: a clean refusal (an
SglxError with a hint) or success, never another exception. For the save stream two more:
whatever the blocks the stream arrives in, a full bundle's stream goes on byte for byte and
reads the same, and a delta's output is a tar whose members are the input's minus those left
out. No example database is kept; the module runs in well under a minute on two cores.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import tuned_files
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from test_bundle_layers import save_archive
from test_image_identity import oci_archive, podman_archive

from sglx.bundle.layers import chain_ids
from sglx.bundle.save_stream import SaveFilter
from sglx_core import comm_share, tuned
from sglx_core.engines import Engine, engine_from
from sglx_core.errors import SglxError
from sglx_core.profile import load_profile

GFX942 = load_profile("gfx942")
SETTINGS = settings(
    max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


def _archive(kind: str, layers: list[bytes]) -> tuple[bytes, list[str], list[str]]:
    """A save stream of `kind`, the ids the engine may name its image by, and its diff ids."""
    if kind == "classic":
        raw, image_id, diff_ids, _ = save_archive(layers)
        return raw, [image_id], diff_ids
    if kind == "podman":
        raw, config_id, diff_ids = podman_archive(layers)
        return raw, [config_id], diff_ids
    raw, held = oci_archive(layers, compress=kind == "oci-gzip", nested=kind == "oci-nested")
    return raw, [held["config"], held["manifest"]], held["diff_ids"]


KINDS = ["classic", "oci", "oci-gzip", "oci-nested", "podman"]


@st.composite
def saves(draw: st.DrawFn) -> tuple[bytes, str, list[str], frozenset[str], list[int]]:
    """A save stream, the id its engine names, a set of chain ids to leave out, and the sizes
    of the blocks it arrives in."""
    kind = draw(st.sampled_from(KINDS))
    layers = draw(st.lists(st.binary(min_size=1, max_size=1500), min_size=1, max_size=3))
    layers = [data + os.urandom(4) for data in layers]  # distinct diff ids
    raw, ids, diff_ids = _archive(kind, layers)
    chains = chain_ids(diff_ids)
    drop = frozenset(chains[: draw(st.integers(0, len(chains) - 1))])
    blocks = draw(st.lists(st.integers(1, 5000), min_size=1, max_size=8))
    return raw, draw(st.sampled_from(ids)), diff_ids, drop, blocks


def _split(raw: bytes, sizes: list[int]) -> list[bytes]:
    out, at, turn = [], 0, 0
    while at < len(raw):
        size = sizes[turn % len(sizes)]
        out.append(raw[at : at + size])
        at, turn = at + size, turn + 1
    return out


def _stream(filt: SaveFilter, raw: bytes, sizes: list[int]) -> bytes:
    return b"".join(bytes(b) for b in filt.run(_split(raw, sizes)))


def _names(raw: bytes) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        return tar.getnames()


@SETTINGS
@given(saves())
def test_a_save_stream_reads_the_same_in_any_blocks_and_a_delta_is_a_tar_of_what_it_kept(
    save: tuple[bytes, str, list[str], frozenset[str], list[int]],
) -> None:
    raw, engine_id, diff_ids, drop, sizes = save
    full = SaveFilter(engine_id, diff_ids)
    assert _stream(full, raw, sizes) == raw
    recorded = full.recorded()
    assert recorded is not None, full.problem
    assert [x.diff_id for x in recorded] == diff_ids and all(x.carried for x in recorded)
    assert full.identity is not None and engine_id in (
        full.identity.config_digest,
        full.identity.manifest_digest,
    )
    if not drop:
        return
    delta = SaveFilter(engine_id, diff_ids, drop)
    out = _stream(delta, raw, sizes)
    layers = delta.layers()
    left_out = {m.name for m in delta.dropped}
    assert _names(out) == [name for name in _names(raw) if name not in left_out]
    assert [x.chain_id for x in layers] == chain_ids(diff_ids)
    assert all(x.carried or x.chain_id in drop for x in layers)


HOSTILE = [
    b"\x00" * 512, b"ustar\x00", b"0" * 12, b"../../etc/passwd", b"manifest.json",
    b"index.json", b"blobs/sha256/", b'{"manifests": [', b"9" * 5000, b"\xff" * 100,
    b'[{"Config": 1}]', b"2", b"x", b"L",
]  # fmt: skip


@SETTINGS
@given(
    saves(),
    st.integers(0, 1 << 20),
    st.integers(0, 600),
    st.lists(st.sampled_from(HOSTILE) | st.binary(max_size=40), max_size=4).map(b"".join),
)
def test_a_damaged_save_stream_is_refused_cleanly_and_a_full_one_still_goes_on_untouched(
    save: tuple[bytes, str, list[str], frozenset[str], list[int]],
    at: int,
    length: int,
    middle: bytes,
) -> None:
    raw, engine_id, diff_ids, drop, sizes = save
    start = at % (len(raw) + 1)
    damaged = raw[:start] + middle + raw[start + length :]
    full = SaveFilter(engine_id, diff_ids)
    assert _stream(full, damaged, sizes) == damaged
    recorded = full.recorded()
    assert recorded is not None or full.problem
    delta = SaveFilter(engine_id, diff_ids, drop or frozenset(chain_ids(diff_ids)[:1]))
    try:
        _stream(delta, damaged, sizes)
        delta.layers()
    except SglxError as error:
        assert error.hint, error.message


# -- what an engine's API says about itself ------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None, database=None)
@given(
    version=st.dictionaries(
        st.sampled_from(["Version", "Components", "ApiVersion", "Os"]),
        JSON
        | st.lists(
            st.fixed_dictionaries({"Name": st.sampled_from(["Podman Engine", "Engine", 5])}),
            max_size=3,
        ),
    ),
    driver_status=JSON
    | st.lists(
        st.lists(
            st.sampled_from(["driver-type", "io.containerd.snapshotter.v1", 1, None]), max_size=3
        ),
        max_size=4,
    ),
)
def test_any_version_and_driver_status_an_engine_reports_give_an_engine(
    version: dict[str, Any], driver_status: Any
) -> None:
    """`docker version` and `docker info` come from the engine's API, whatever answers on the
    socket: any JSON gives an engine (judged untested where it is odd), never an exception."""
    engine = engine_from(version, driver_status)
    assert isinstance(engine, Engine) and engine.store in ("classic", "containerd")
    assert engine.product in ("Docker", "podman") and isinstance(engine.describe(), str)
    assert isinstance(engine.tested(), bool)


# -- tuned sets and profiler traces --------------------------------------------------------------

TUNED_SAMPLES = {
    "bf16_tuned_gemm.csv": tuned_files.table(
        tuned_files.BF16_HEADER, tuned_files.BF16_ROW, ("gfx942", 304)
    ),
    "a8w8_blockscale_tuned_gemm.csv": tuned_files.table(
        tuned_files.BLOCKSCALE_HEADER, tuned_files.BLOCKSCALE_ROW, ("", 304)
    ),
    "tunableop_results0.csv": tuned_files.TUNABLEOP,
    "hipblaslt_tuning.txt": tuned_files.HIPBLASLT,
}
HOSTILE_TEXT = [
    "\x00", "\n", "\r", ",", '"', "\ufeff", "²", "9" * 5000, "gfx950", "cu_num", "Validator,",
    "Git Version: ", ",,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,",
]  # fmt: skip


@st.composite
def damaged_text(draw: st.DrawFn, samples: list[str]) -> str:
    text = draw(st.sampled_from(samples))
    start = draw(st.integers(0, len(text)))
    end = draw(st.integers(start, min(len(text), start + 120)))
    middle = draw(
        st.lists(st.sampled_from(HOSTILE_TEXT) | st.text(max_size=15), max_size=4).map("".join)
    )
    return text[:start] + middle + text[end:]


def _clean(action: Callable[[], Any]) -> None:
    try:
        action()
    except SglxError as error:
        assert error.hint, error.message


@settings(max_examples=40, deadline=None, database=None)
@given(name=st.sampled_from(sorted(TUNED_SAMPLES)), data=st.data())
def test_a_damaged_tuned_file_is_checked_or_refused_cleanly(name: str, data: st.DataObject) -> None:
    import tempfile

    text = data.draw(damaged_text([TUNED_SAMPLES[name]]))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        _clean(lambda: tuned.check_file(path, GFX942))


MANIFEST_SAMPLE = json.dumps(
    {
        "version": 1,
        "arch": "gfx942",
        "files": [{"name": "bf16_tuned_gemm.csv", "rule": "aiter", "sha256": "0" * 64}],
    }
)


@settings(max_examples=40, deadline=None, database=None)
@given(text=damaged_text([MANIFEST_SAMPLE, "{}", "[]"]) | JSON.map(json.dumps))
def test_a_damaged_tuned_manifest_is_read_or_refused_cleanly(text: str) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / tuned.MANIFEST).write_text(text, errors="surrogatepass")
        _clean(lambda: tuned.read_manifest(Path(folder)))


EVENT = st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "B", 1]), "cat": st.sampled_from(["kernel", "cpu_op", None])},
    optional={
        "name": st.text(max_size=10) | st.integers(),
        "ts": st.integers() | st.floats() | st.text(max_size=3),
        "dur": st.integers() | st.floats() | st.none(),
    },
)


@settings(max_examples=60, deadline=None, database=None)
@given(
    document=st.fixed_dictionaries({"traceEvents": st.lists(EVENT | JSON, max_size=8)}) | JSON,
    form=st.sampled_from(["json", "gzip", "cut gzip", "big numbers"]),
)
# times whose sum overflows to inf, and an infinite start: no share of inf over inf
@example({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce",
                           "ts": 1e308, "dur": 1e308}]}, "json")  # fmt: skip
@example({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "x", "ts": 1e400, "dur": 1}]},
         "json")  # fmt: skip
def test_any_trace_is_measured_or_refused_cleanly(document: Any, form: str) -> None:
    """A measured share is a number between 0 and 1 whatever the events' times are."""
    import tempfile

    raw = json.dumps(document).encode()
    if form == "big numbers":
        raw = raw.replace(b"0", b"1e400", 1)
    if form.endswith("gzip"):
        raw = gzip.compress(raw)
        raw = raw[: len(raw) // 2] if form == "cut gzip" else raw
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "TP-0.trace.json.gz"
        path.write_bytes(raw)
        try:
            share = comm_share.measure(path, GFX942.gate.comm_share)
        except SglxError as error:
            assert error.hint, error.message
            return
        assert 0.0 <= share.share <= 1.0, share


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_of_save_stream_is_drawn(kind: str) -> None:
    """The strategies above draw every store's stream: each kind reads as an image."""
    raw, ids, diff_ids = _archive(kind, [b"a" * 100, b"b" * 10])
    filt = SaveFilter(ids[-1], diff_ids)
    assert _stream(filt, raw, [700]) == raw and filt.recorded() is not None, filt.problem


# --- the index beside a docker-archive's manifest.json (sglx base load) --------------------

_KEYS = st.sampled_from(["manifests", "mediaType", "digest", "size", "schemaVersion", "config"])
_MEDIA = st.sampled_from([
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "",
])  # fmt: skip


def _descriptor(media: str, held: tuple[str, int], digest: Any, size: Any) -> dict[str, Any]:
    """A descriptor of a blob the archive holds, its digest or size replaced where given."""
    return {
        "mediaType": media,
        "digest": held[0] if digest is None else digest,
        "size": held[1] if size is None else size,
    }


@st.composite
def _index_documents(draw: st.DrawFn, blobs: dict[str, int]) -> Any:
    """index.json as an engine might damage it: any JSON, or descriptors (of the blobs the
    archive holds, with their sizes or others, or of none) in lists nested as image indexes
    nest."""
    leaf = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=8)
    descriptor = st.builds(
        _descriptor,
        _MEDIA,
        st.sampled_from(sorted(blobs.items())),
        st.none() | st.text(max_size=71),
        st.none() | st.integers(-1, 4096) | leaf,
    )
    anything = st.recursive(
        leaf | descriptor,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=5),
        max_leaves=16,
    )
    return draw(st.fixed_dictionaries({"manifests": st.lists(descriptor, max_size=3)}) | anything)


@SETTINGS
@given(data=st.data())
def test_any_index_beside_a_docker_archive_is_read_or_refused_cleanly(data: st.DataObject) -> None:
    """`sglx base load`'s prediction of the containerd store's id from Docker 25+'s save: any
    index.json beside the manifest.json gives an id that leads to the checked config (or none),
    or a refusal naming the archive; never another exception."""
    import tempfile

    from helpers.image_archives import docker_25_members, file_member, write_tar

    from sglx.base_archive import inspect_archive

    members = docker_25_members()
    blobs = {
        "sha256:" + i.name.removeprefix("blobs/sha256/"): i.size
        for i, _ in members
        if i.name.startswith("blobs/sha256/")
    }
    index = json.dumps(data.draw(_index_documents(blobs))).encode()
    members = [file_member(i.name, index) if i.name == "index.json" else (i, d) for i, d in members]
    with tempfile.TemporaryDirectory() as folder:
        archive = write_tar(Path(folder) / "save.tar", members)
        try:
            read = inspect_archive(archive)
        except SglxError as refused:
            assert str(archive) in refused.message and refused.hint, refused
            return
    assert read.manifest_digest is None or read.manifest_digest in blobs, read
