"""Reading files that came from outside (bundles, checkpoints, inventories): the one place that
decides how far sglx trusts a file before it parses it.

Three rules, each answering a failure seen on real hostile input:
- only a regular file is opened, and without blocking: a FIFO or `/dev/zero` put where a
  manifest or a weights file is expected would otherwise hang the reader or feed it forever;
- every read is bounded: a 1 GiB sparse `bundle.json.sig` must not cost 1 GiB of memory;
- JSON is refused when nested deeper than any real document, or when an object repeats a key
  (`json.loads` keeps the last one silently, so two readers of one manifest could disagree);
- a number is refused when no real document holds it: an integer of more than MAX_INT_DIGITS
  digits (Python's own limit raises a bare ValueError at 4,300, and arithmetic on one costs
  seconds), or a literal whose value overflows a float (`1e400` would read as infinity).
"""

from __future__ import annotations

import errno
import json
import math
import os
import posixpath
import stat
import tarfile
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from pydantic import BaseModel, ValidationError

from sglx_core.errors import SglxError

MAX_JSON_DEPTH = 64
"""Deepest nesting of objects and arrays accepted (manifests and configs use about 4)."""
MAX_INT_DIGITS = 40
"""Longest integer accepted: a byte count or a token id has at most 20 digits (2**64)."""
ModelT = TypeVar("ModelT", bound=BaseModel)


def open_regular(path: Path, *, what: str, hint: str | None = None) -> BinaryIO:
    """`path` opened for reading in binary mode, refused unless it is a regular file.

    The open itself does not block (O_NONBLOCK, so a FIFO with no writer cannot hang it); the
    type is read from the opened descriptor, so a swap between the check and the read is
    caught too."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        code = "not_found" if exc.errno == errno.ENOENT else "environment"
        raise SglxError(
            f"{path}: cannot read the {what}: {exc.strerror}",
            hint=hint or f"check that {path.name} is a readable file",
            code=code,
            path=str(path),
        ) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise SglxError(
            f"{path}: the {what} is {file_kind(mode)}, not a regular file",
            hint=hint or f"replace {path.name} with the file itself",
            code="not_regular",
            path=str(path),
        )
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def is_plain_name(name: str) -> bool:
    """Whether `name` names one entry of a folder: not empty, `.` or `..`, no `/` or `\\`, no
    NUL or other control character (a NUL makes every path call raise a bare ValueError)."""
    return (
        bool(name)
        and name not in (".", "..")
        and "/" not in name
        and "\\" not in name
        and not any(ord(c) < 0x20 or ord(c) == 0x7F for c in name)
    )


def file_kind(mode: int) -> str:
    """What a non-regular file is, in words ("a FIFO"), from its `st_mode`."""
    for test, name in (
        (stat.S_ISLNK, "a symlink"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a file"


def read_bounded(path: Path, *, what: str, max_bytes: int, hint: str | None = None) -> bytes:
    """The bytes of the regular file `path`, refused when it holds more than `max_bytes`."""
    with open_regular(path, what=what, hint=hint) as handle:
        raw = handle.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise SglxError(
            f"{path}: the {what} is larger than {_size(max_bytes)}; no real one is",
            hint=hint or f"the file is damaged or not a {what}; copy {path.name} again",
            code="too_large",
            path=str(path),
        )
    return raw


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB" if n >= 1 << 10 else f"{n} B"


def parse_json(raw: bytes | str, *, path: Path, what: str, hint: str | None = None) -> Any:
    """Parse `raw` (the contents of `path`), refusing invalid JSON, repeated keys in one object
    and nesting deeper than MAX_JSON_DEPTH."""
    fix = hint or f"copy {path.name} again from its source"
    try:
        document = json.loads(
            raw, object_pairs_hook=_unique_keys, parse_int=_int, parse_float=_float
        )
    except _RepeatedKey as exc:
        raise SglxError(
            f"{path}: the {what} repeats the key {exc.key!r} in one object; readers would "
            "disagree on its value",
            hint=fix,
            code="corrupt",
            path=str(path),
        ) from None
    except RecursionError:
        raise _too_deep(path, what, fix) from None
    except _OutOfRange as exc:
        raise SglxError(
            f"{path}: the {what} holds {exc.what}; no real one does",
            hint=fix,
            code="corrupt",
            path=str(path),
        ) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SglxError(
            f"{path}: the {what} is not valid JSON ({exc})",
            hint=fix,
            code="corrupt",
            path=str(path),
        ) from None
    if _nesting(document) > MAX_JSON_DEPTH:
        raise _too_deep(path, what, fix)
    return document


def read_json(path: Path, *, what: str, max_bytes: int, hint: str | None = None) -> Any:
    """`read_bounded` then `parse_json`."""
    raw = read_bounded(path, what=what, max_bytes=max_bytes, hint=hint)
    return parse_json(raw, path=path, what=what, hint=hint)


def parse_model(
    raw: bytes, model: type[ModelT], *, path: Path, what: str, hint: str, code: str = "corrupt"
) -> ModelT:
    """`raw` (the contents of `path`) parsed under `parse_json`'s rules, then validated as
    `model` in JSON mode (strict models still take JSON arrays for tuples). A schema error
    names the first field wrong (`schema_problem`)."""
    parse_json(raw, path=path, what=what, hint=hint)
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        raise SglxError(
            f"{path}: not a valid {what}: {schema_problem(exc)}",
            hint=hint,
            code=code,
            path=str(path),
        ) from None


def schema_problem(exc: ValidationError) -> str:
    """The first field a schema refused and why, with how many more it refused."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "(top level)"
    more = exc.error_count() - 1
    return f"{where}: {first['msg']}" + (f" (and {more} more)" if more else "")


class _OutOfRange(Exception):
    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


def _int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise _OutOfRange(f"an integer of {digits} digits (at most {MAX_INT_DIGITS} are read)")
    return int(text)


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _OutOfRange(
            f"the number {text[:24]}{'...' if len(text) > 24 else ''}, which overflows a float"
        )
    return value


class _RepeatedKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document: dict[str, Any] = {}
    for key, value in pairs:
        if key in document:
            raise _RepeatedKey(key)
        document[key] = value
    return document


def _nesting(document: Any) -> int:
    """Nesting depth of a parsed document, walked with an explicit stack (no recursion), and
    stopped as soon as it passes MAX_JSON_DEPTH."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(document, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        deepest = max(deepest, depth)
        if depth > MAX_JSON_DEPTH:
            break
        stack.extend((child, depth + 1) for child in children)
    return deepest


def _too_deep(path: Path, what: str, fix: str) -> SglxError:
    return SglxError(
        f"{path}: the {what} is nested more than {MAX_JSON_DEPTH} levels deep; no real one is",
        hint=fix,
        code="corrupt",
        path=str(path),
    )


MAX_LINK_HOPS = 40
"""Links followed to a tar member's bytes at most (the kernel's own limit for paths)."""


def tar_regular_member(tar: tarfile.TarFile, name: str) -> tarfile.TarInfo | None:
    """The regular member that `name` of an untrusted tar holds or links to, its symbolic and
    hard links followed inside the archive iteratively (tarfile's own `extractfile` recurses: a
    member that links to itself raised RecursionError); None when there is none, or the links go
    round or past MAX_LINK_HOPS."""
    current = posixpath.normpath(name).lstrip("/") if name else name
    for _ in range(MAX_LINK_HOPS + 1):
        try:
            member = tar.getmember(current)
        except KeyError:
            return None
        if member.isreg():
            return member
        if member.issym():
            current = posixpath.normpath(
                posixpath.join(posixpath.dirname(current), member.linkname)
            ).lstrip("/")
        elif member.islnk():
            current = posixpath.normpath(member.linkname).lstrip("/")
        else:
            return None
    return None


def tar_member_bytes(tar: tarfile.TarFile, name: str, *, max_bytes: int) -> bytes | None:
    """The bytes of member `name` of an untrusted tar (`tar_regular_member`), at most
    `max_bytes` + 1 of them: the caller refuses a longer one. None where there is no file."""
    member = tar_regular_member(tar, name)
    handle = None if member is None else tar.extractfile(member)
    if handle is None:
        return None
    with handle:
        return handle.read(max_bytes + 1)
