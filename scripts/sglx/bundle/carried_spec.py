"""The run spec a bundle carries (`meta/run.json`), read once per install, and the roots this
sglx's own profile names for the bundle's arch.

The run spec is the bundle's claim: install prints its start line from it, but where install
writes as root (the weights store, the JIT cache folders) is taken from it only when it names
this sglx's own roots for the arch (`own_roots`), unless the site names a root itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglx.bundle import layout
from sglx_core.errors import SglxError
from sglx_core.untrusted import read_json


@dataclass(frozen=True)
class CarriedSpec:
    """`meta/run.json` of a bundle: its JSON object, or None and why (absent, unreadable)."""

    path: Path
    data: dict[str, Any] | None
    problem: SglxError | None = None

    def get(self, key: str) -> Any:
        return None if self.data is None else self.data.get(key)


@dataclass(frozen=True)
class OwnRoots:
    """The roots this sglx's profile of an arch names: the weights store and the JIT cache."""

    models: str
    jit: str


def read_carried_spec(bundle: Path) -> CarriedSpec:
    path = bundle / layout.RUN_SPEC
    if not path.is_file():
        return CarriedSpec(path, None)
    try:
        data = read_json(path, what="run spec", max_bytes=layout.MAX_META_BYTES)
    except SglxError as exc:
        return CarriedSpec(path, None, exc)
    if not isinstance(data, dict):
        problem = SglxError(f"{path}: the run spec is not a JSON object", code="corrupt")
        return CarriedSpec(path, None, problem)
    return CarriedSpec(path, data)


def own_roots(arch: object) -> OwnRoots | None:
    """The roots of this sglx's own profile of `arch`; None for an arch it does not know."""
    from sglx_core.profile import load_profile

    if not isinstance(arch, str):
        return None
    try:
        profile = load_profile(arch)
    except SglxError:
        return None
    return OwnRoots(models=str(profile.weights.store), jit=profile.container.jit_cache.host_root)
