"""The `docker save` stream on its way into chunks: read member by member, passed through
byte for byte, the `layer.tar` of each layer a delta references left out, and its layers
recorded.

The stream is a tar in one of two formats, both with a `manifest.json` that names the config
and the layers' paths:

- Docker 20.10's classic archive: one folder per layer with `VERSION`, `json` and `layer.tar`,
  the image config `<hex>.json`, `repositories`; written in name order, so a folder's `json`
  comes before its `layer.tar`. `layers.identify` names the layer from that `json`; its
  `layer.tar` is then dropped (header, data and padding, and any extended header before it)
  when the engine of a site that holds the parent has it.
- the OCI layout of Docker 25 and later (`index.json`, `oci-layout`, `blobs/sha256/<hex>`),
  whose layer blobs may be compressed, and podman's archive (`<hex>.json`, `<hex>.tar`). A
  layer whose member is named by its diff id (uncompressed) is dropped by that name; a
  compressed one is carried.

Nothing is buffered but tar headers and the small members (JSON, and blobs of at most
`MAX_BLOB`, among them the config and the manifests); the bytes go on in the blocks they came
in.

At the end, `layers()` checks what streamed against the image: `manifest.json` names the one
image, its config lists the engine's diff ids, the engine's image id is the config's digest or
the manifest's (`identity`, sglx.image_identity), every folder dropped is the layer its name was
computed for, and no link kept points at a dropped file. Anything else is an error, never a
bundle that a site would fail to load.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sglx.bundle.layers import chain_ids, identify, link_target
from sglx.bundle.manifest import LayerEntry
from sglx.image_identity import digest_of, imported_manifest, leads_to_config
from sglx_core.digests import DIGEST, HEX64
from sglx_core.errors import SglxError
from sglx_core.untrusted import parse_json

TAR_BLOCK = 512
MAX_JSON = 16 << 20  # manifest.json and the image config (real ones are a few KiB)
MAX_LAYER_JSON = 1 << 20  # a layer folder's json
MAX_BLOB = 1 << 20  # an OCI blob kept to be read (configs and manifests are a few KiB)
MAX_CAPTURED = 64 << 20  # all members kept to be read, together
_BLOB = re.compile(f"blobs/sha256/({HEX64})")
_CLASSIC_CONFIG = re.compile(rf"({HEX64})\.json")
_FLAT_LAYER = re.compile(rf"({HEX64})\.tar")  # podman's docker-archive
MAX_EXTENDED = 1 << 20  # a PAX or GNU long-name header's data
_LAYER = re.compile(rf"({HEX64})/layer\.tar")
_LAYER_JSON = re.compile(f"({HEX64})/json")
_EXTENDED = (b"x", b"L", b"K")
_LINK = b"2"
_FILE = (b"0", b"\0", b"7")
Block = bytes | bytearray | memoryview


@dataclass
class Member:
    name: str
    kind: bytes
    size: int
    linkname: str
    kept: bool


@dataclass
class _Current:
    member: Member | None  # None for an extended header's own data
    remaining: int  # data and padding still to come
    data_left: int  # data (no padding) still to come
    emit: bool
    capture: bytearray | None
    extended: bool = False


@dataclass(frozen=True)
class Identity:
    """The saved image's two digests (sglx.image_identity): its config's and its manifest's."""

    config_digest: str
    manifest_digest: str


@dataclass
class SaveFilter:
    """`run` passes a save stream through; `layers` says what it held, after the stream.

    With chain ids to `drop` (a delta) it filters, and any stream it does not understand is an
    error. Without (a full bundle) every block goes on untouched and the stream is only read
    beside it: `recorded` is then None when it could not be read as expected (`problem` says
    why), never an error during the stream."""

    engine_id: str  # the image id the engine reports: its config or its manifest digest
    diff_ids: Sequence[str]
    drop: frozenset[str] = frozenset()  # chain ids whose layer.tar the archive leaves out
    members: dict[str, Member] = field(default_factory=dict)
    unidentified: list[str] = field(default_factory=list)  # folders no chain id names
    problem: str | None = None  # why a full bundle's stream could not be read
    identity: Identity | None = None  # set by layers()
    _captured: dict[str, bytes] = field(default_factory=dict)
    _folders: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._chains = chain_ids(self.diff_ids)
        self._captured_bytes = 0
        self._header_buffer = bytearray()
        self._held = bytearray()  # extended headers waiting for the member they describe
        self._extended: dict[str, str] = {}
        self._current: _Current | None = None
        self._trailer = False

    @property
    def dropped(self) -> list[Member]:
        return [m for m in self.members.values() if not m.kept]

    def run(self, blocks: Iterable[Block]) -> Iterator[Block]:
        for block in blocks:
            if self.drop:
                yield from self._feed(block)
                continue
            yield block
            if self.problem is None:
                try:
                    for _ in self._feed(block):
                        pass
                except SglxError as exc:
                    self.problem = exc.message
        if self._header_buffer or self._current is not None or not self._trailer:
            error = _stream_error("the stream ended inside a member or before the end of the tar")
            if self.drop:
                raise error
            self.problem = self.problem or error.message

    def recorded(self) -> tuple[LayerEntry, ...] | None:
        """`layers()`; for a full bundle, None when its stream could not be read as expected."""
        if self.drop:
            return self.layers()
        if self.problem is None:
            try:
                return self.layers()
            except SglxError as exc:
                self.problem = exc.message
        return None

    def _feed(self, block: Block) -> Iterator[Block]:
        header, held, extended = self._header_buffer, self._held, self._extended
        view = memoryview(block)
        while view:
            if self._trailer:
                yield view
                return
            current = self._current
            if current is not None:
                take = min(current.remaining, len(view))
                piece = view[:take]
                if current.emit:
                    yield piece if take < len(block) else block
                if current.capture is not None:
                    current.capture += piece if current.extended else piece[: current.data_left]
                current.data_left = max(0, current.data_left - take)
                current.remaining -= take
                view = view[take:]
                if current.remaining == 0:
                    if current.extended:
                        assert current.capture is not None
                        extended.update(_extended_fields(bytes(current.capture), held))
                        held += current.capture
                    else:
                        self._done(current)
                    self._current = None
                continue
            need = TAR_BLOCK - len(header)
            header += view[:need]
            view = view[need:]
            if len(header) < TAR_BLOCK:
                continue
            raw = bytes(header)
            header.clear()
            if raw == bytes(TAR_BLOCK):
                # The end of the archive: the zero blocks and whatever follows, as they are.
                yield bytes(held) + raw
                self._trailer = True
                continue
            self._current, out = self._header(raw, held, extended)
            if out:
                yield out

    def _header(
        self, raw: bytes, held: bytearray, extended: dict[str, str]
    ) -> tuple[_Current, bytes]:
        _check_sum(raw)
        kind = raw[156:157]
        size = _number(raw[124:136])
        padded = -(-size // TAR_BLOCK) * TAR_BLOCK
        if kind in _EXTENDED:
            if size > MAX_EXTENDED:
                raise _stream_error(f"an extended tar header of {size} bytes")
            held += raw
            return _Current(None, padded, size, False, bytearray(), extended=True), b""
        name = extended.get("path") or _name(raw)
        linkname = extended.get("linkpath") or _field(raw[157:257])
        if "size" in extended:
            size = int(extended["size"])
            padded = -(-size // TAR_BLOCK) * TAR_BLOCK
        keep = not self._droppable(name) and not self._links_to_dropped(kind, name, linkname)
        member = Member(name=name, kind=kind, size=size, linkname=linkname, kept=keep)
        if kind != b"g":
            self.members[name] = member
        out = bytes(held) + raw if keep else b""
        held.clear()
        extended.clear()
        capture = None
        if kind in _FILE and size <= self._bound(name) and self._room(size):
            capture = bytearray()
        return _Current(member, padded, size, keep, capture), out

    def _bound(self, name: str) -> int:
        if name in ("manifest.json", "index.json") or _CLASSIC_CONFIG.fullmatch(name):
            return MAX_JSON
        if _BLOB.fullmatch(name):
            return MAX_BLOB
        return MAX_LAYER_JSON if _LAYER_JSON.fullmatch(name) else -1

    def _room(self, size: int) -> bool:
        """Whether `size` more bytes may be kept: past MAX_CAPTURED nothing more is (a member
        that then goes missing is named by `layers()`)."""
        if self._captured_bytes + size > MAX_CAPTURED:
            return False
        self._captured_bytes += size
        return True

    def _droppable(self, name: str) -> bool:
        if not self.drop:
            return False
        digest = _named_digest(name)
        if digest is not None:
            return self._blob_droppable(digest)
        match = _LAYER.fullmatch(name)
        if match is None:
            return False
        index = self._folders.get(match.group(1))
        return index is not None and self._chains[index] in self.drop

    def _links_to_dropped(self, kind: bytes, name: str, linkname: str) -> bool:
        """A link to a layer tar named by its digest and left out (podman's archive links each
        legacy folder's `layer.tar` to the `<hex>.tar` it wrote before) is left out with it.
        (A classic archive's link to another folder's layer.tar stays an error in `layers`.)"""
        if not self.drop or kind != _LINK:
            return False
        target = self.members.get(link_target(name, linkname))
        return target is not None and not target.kept and _named_digest(target.name) is not None

    def _blob_droppable(self, digest: str) -> bool:
        """An OCI blob (or podman's `<hex>.tar`) is a layer's uncompressed tar when its digest
        is that layer's diff id (the classic store's save, podman's, and layers the containerd
        store loaded from a classic archive); it is left out when every place of that layer in
        the image is left out."""
        places = [i for i, diff_id in enumerate(self.diff_ids) if diff_id == digest]
        return bool(places) and all(self._chains[i] in self.drop for i in places)

    def _done(self, current: _Current) -> None:
        member = current.member
        if member is None or current.capture is None:
            return
        self._captured[member.name] = bytes(current.capture)
        match = _LAYER_JSON.fullmatch(member.name)
        if match is None or not self.drop:
            return
        folder = match.group(1)
        try:
            text = self._captured[member.name].decode()
        except UnicodeDecodeError:
            text = ""
        index = identify(text, folder, self._chains)
        if index is None:
            self.unidentified.append(folder)
        else:
            self._folders[folder] = index

    def layers(self) -> tuple[LayerEntry, ...]:
        """The image's layers as the archive holds them, each checked against the image."""
        config_name, paths = self._manifest_layers()
        config = self._captured.get(config_name)
        if config is None:
            raise _stream_error(f"the image config {config_name} is missing")
        config_digest = digest_of(config)
        if config_name not in _config_names(config_digest):
            raise _stream_error(f"the image config {config_name} does not hash to its name")
        rootfs = _parse(config, config_name).get("rootfs")
        diff_ids = rootfs.get("diff_ids") if isinstance(rootfs, dict) else None
        if diff_ids != list(self.diff_ids) or len(paths) != len(self.diff_ids):
            raise _stream_error("the image config's layers are not the engine's")
        entries: list[LayerEntry] = []
        for index, path in enumerate(paths):
            member = self.members.get(path)
            if member is None or (member.kind not in _FILE and member.kind != _LINK):
                raise _stream_error(f"manifest.json names {path}, which the stream did not hold")
            match = _LAYER.fullmatch(path)
            folder = match.group(1) if match else None
            named = self._folders.get(folder) if folder else None
            digest = _named_digest(path)
            if digest is not None:
                if not member.kept and digest != self.diff_ids[index]:
                    raise _stream_error(f"layer {index} ({path}) left out is not its diff id")
            elif (named is not None and named != index) or (not member.kept and named != index):
                raise _stream_error(f"layer {index} ({path}) was identified as layer {named}")
            entries.append(
                LayerEntry(
                    diff_id=self.diff_ids[index],
                    chain_id=self._chains[index],
                    size=self._size(member),
                    carried=member.kept,
                )
            )
        for member in self.dropped:
            target = self.members.get(link_target(member.name, member.linkname))
            if member.name not in paths and not (
                member.kind == _LINK and target is not None and target.name in paths
            ):
                raise _stream_error("a member left out is not a layer of the image")
        for member in self.members.values():
            if member.kept and member.kind == _LINK:
                target = self.members.get(link_target(member.name, member.linkname))
                if target is None or not target.kept:
                    raise _stream_error(f"{member.name} links to a file the archive leaves out")
        manifest_digest = self._manifest_digest(config, config_digest, entries)
        if self.engine_id not in (config_digest, manifest_digest):
            raise _stream_error(
                f"the engine names the image {self.engine_id}, which is neither its config's "
                f"digest ({config_digest}) nor its manifest's ({manifest_digest})"
            )
        self.identity = Identity(config_digest, manifest_digest)
        return tuple(entries)

    def _manifest_digest(
        self, config: bytes, config_digest: str, layers: Sequence[LayerEntry]
    ) -> str:
        """The digest the containerd store names the image by: the one `index.json` names (its
        blob, when kept, must hash to it and lead to this config), else, for Docker 20.10's
        archive, that of the manifest the store writes on loading it."""
        raw = self._captured.get("index.json")
        if raw is None:
            layer_digests = [(x.diff_id, x.size) for x in layers]
            return digest_of(imported_manifest((config_digest, len(config)), layer_digests))
        manifests = _parse(raw, "index.json").get("manifests")
        if not isinstance(manifests, list) or len(manifests) != 1:
            raise _stream_error("index.json does not name one image")
        digest = _descriptor_digest(manifests[0], "index.json")
        if not leads_to_config(manifests[0], config_digest, self._manifest_blob, "index.json"):
            raise _stream_error(f"index.json's image {digest} does not lead to the image config")
        return digest

    def _manifest_blob(self, descriptor: Any, where: str) -> Any:
        """A manifest or image index the stream held (image_identity.BlobReader): one it did
        not keep (too large) is trusted by its name, one it did not hold leads nowhere."""
        name = f"blobs/sha256/{_descriptor_digest(descriptor, where).removeprefix('sha256:')}"
        raw = self._captured.get(name)
        if raw is None:
            return name in self.members
        if digest_of(raw) != descriptor["digest"]:
            raise _stream_error(f"{name} does not hash to its name")
        return _parse(raw, name)

    def _manifest_layers(self) -> tuple[str, list[str]]:
        raw = self._captured.get("manifest.json")
        try:
            manifest = None if raw is None else parse_json(raw, path=Path("manifest.json"), what="")
        except SglxError:
            manifest = None
        if (
            not isinstance(manifest, list)
            or len(manifest) != 1
            or not isinstance(manifest[0], dict)
            or not isinstance(manifest[0].get("Config"), str)
            or not isinstance(manifest[0].get("Layers"), list)
            or not all(isinstance(p, str) for p in manifest[0]["Layers"])
        ):
            raise _stream_error("manifest.json does not name this one image and its layers")
        return str(manifest[0]["Config"]), list(manifest[0]["Layers"])

    def _size(self, member: Member) -> int:
        if member.kind != _LINK:
            return member.size
        target = self.members.get(link_target(member.name, member.linkname))
        return target.size if target is not None else 0


def _named_digest(name: str) -> str | None:
    """The digest a member's name gives it: an OCI blob's, or a layer tar podman's archive
    names by its diff id (`<hex>.tar`); None for any other name."""
    match = _BLOB.fullmatch(name) or _FLAT_LAYER.fullmatch(name)
    return None if match is None else f"sha256:{match.group(1)}"


def _config_names(digest: str) -> tuple[str, str]:
    """Where an archive keeps the config of this digest: Docker 20.10 as `<hex>.json`, the OCI
    layout of later engines as `blobs/sha256/<hex>`."""
    hexdigest = digest.removeprefix("sha256:")
    return (f"{hexdigest}.json", f"blobs/sha256/{hexdigest}")


def _parse(raw: bytes, name: str) -> dict[str, Any]:
    """A JSON object of the stream, through the shared bounded reader."""
    try:
        document = parse_json(raw, path=Path(name), what="docker save member")
    except SglxError as exc:
        raise _stream_error(exc.message) from None
    if not isinstance(document, dict):
        raise _stream_error(f"{name} is not a JSON object")
    return document


def _descriptor_digest(descriptor: object, where: str) -> str:
    digest = descriptor.get("digest") if isinstance(descriptor, dict) else None
    if not isinstance(digest, str) or not re.fullmatch(DIGEST, digest):
        raise _stream_error(f"{where} names a manifest without a sha256 digest")
    return digest


def _extended_fields(data: bytes, held: bytearray) -> dict[str, str]:
    """The fields an extended header sets for the next member: a PAX header's records, or a
    GNU long name or link (`L`/`K`, whose type the held header block says)."""
    kind = bytes(held[-TAR_BLOCK + 156 : -TAR_BLOCK + 157])
    size = _number(bytes(held[-TAR_BLOCK + 124 : -TAR_BLOCK + 136]))
    body = data[:size]
    if kind == b"L":
        return {"path": _field(body)}
    if kind == b"K":
        return {"linkpath": _field(body)}
    fields: dict[str, str] = {}
    while body:
        length_text = body.partition(b" ")[0]
        length = int(length_text) if length_text.isdigit() else 0
        if length <= len(length_text) or length > len(body):
            raise _stream_error("a PAX header record is malformed")
        record = body[len(length_text) + 1 : length]
        key, _, value = record.rstrip(b"\n").partition(b"=")
        fields[key.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
        body = body[length:]
    return {k: v for k, v in fields.items() if k in ("path", "linkpath", "size")}


def _name(raw: bytes) -> str:
    name = _field(raw[0:100])
    if raw[257:263] == b"ustar\0":  # POSIX ustar: the prefix field holds the leading folders
        prefix = _field(raw[345:500])
        if prefix:
            return f"{prefix}/{name}"
    return name


def _field(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _number(raw: bytes) -> int:
    if raw and raw[0] & 0x80:  # GNU base-256
        return int.from_bytes(bytes([raw[0] & 0x7F]) + raw[1:], "big")
    text = raw.replace(b"\0", b" ").strip()
    try:
        return int(text, 8) if text else 0
    except ValueError:
        raise _stream_error(f"a tar header number {raw!r} is not octal") from None


def _check_sum(raw: bytes) -> None:
    if _number(raw[148:156]) != sum(raw[:148]) + 8 * 32 + sum(raw[156:]):
        raise _stream_error("a tar header fails its checksum")


def _stream_error(what: str) -> SglxError:
    return SglxError(
        f"the docker save stream is not the archive sglx expects: {what}",
        hint="create the bundle again; if it fails the same way, create a full bundle "
        "(without --since) and report the engine's `docker version`",
        code="environment",
    )
