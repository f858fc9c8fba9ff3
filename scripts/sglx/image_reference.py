"""An image reference as Docker's reference grammar (distribution/reference) reads one,
without digests: `NAME[:TAG]`, checked before it reaches a bundle, a tag or a shell."""

from __future__ import annotations

import re

from sglx_core.errors import SglxError

_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_DOMAIN = rf"{_LABEL}(?:\.{_LABEL})*(?::[0-9]+)?"
_COMPONENT = r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*"
REFERENCE = re.compile(
    rf"(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*(?::[\w][\w.-]{{0,127}})?", re.ASCII
)
"""The grammar; install.sh's and the bundle_install role's copies are made from it."""


def check_reference(ref: str, where: str) -> str:
    """`ref` if it is a valid image reference (name[:tag]); else an error naming `where`."""
    if len(ref) > 255 or not REFERENCE.fullmatch(ref):
        raise SglxError(
            f"{where}: {ref!r} is not an image reference",
            hint="use lowercase NAME[:TAG], e.g. rocm/pytorch:rocm7.2.4 (a tag is letters, "
            "digits, '_', '.' and '-', at most 128)",
            code="usage",
        )
    return ref


def split_reference(ref: str) -> tuple[str, str]:
    """(repository, tag) of a valid reference; the tag defaults to "latest"."""
    repository, sep, tag = ref.rpartition(":")
    if not sep or "/" in tag:  # no tag, or the colon was a registry port
        return ref, "latest"
    return repository, tag
