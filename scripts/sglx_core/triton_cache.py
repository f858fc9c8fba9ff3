"""The prebuilt Triton cache an image carries: its key, its manifest, and whether it fits a host.

`sglx image build` compiles sglx's Triton kernels for the image's device targets on the CPU
builder (sglx_kernels.warm, driven by sglx_runtime.warm_cache) into `IMAGE_ROOT`, with a
manifest. At every start the plugin copies the entries into the node-local cache folder only
when the key matches what runs: a Triton cache built for one GPU and loaded on a near-identical
one has produced silently garbled output when the architecture was missing from the key
(vllm-project/vllm#41871), so sglx compares the key itself instead of trusting Triton's.

The key is the target (backend, gfx arch, warp size), the Triton version and the digest of the
sglx_kernels sources (`kernels_digest`): a change to any of them makes the entries unusable.
This module imports neither torch nor Triton, so the check costs nothing at start.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sglx_core.errors import SglxError
from sglx_core.untrusted import read_json

# Where the image keeps the prebuilt cache: read-only, owned by root.
IMAGE_ROOT = "/opt/sglx/triton-cache"
MANIFEST = "manifest.json"
SPEC = "spec.json"  # what was compiled (sglx_kernels.warm's --spec), kept to reproduce it
ENTRIES = "triton"  # the Triton cache folder under IMAGE_ROOT, as TRITON_CACHE_DIR lays it out
LABEL = "io.sglx.triton-cache"
SCHEMA = 1
MAX_MANIFEST_BYTES = 4 << 20
MAX_ENTRIES = 4096
# The sources whose change changes what Triton compiles (kernels, launch planning, tuning).
KERNEL_SOURCES = ("*.py", "ops/*.py", "tuning.json")


@dataclass(frozen=True)
class CacheKey:
    backend: str  # "hip" | "cuda"
    arch: str  # "gfx942"; NVIDIA: the compute capability ("90")
    warp_size: int
    triton: str  # triton.__version__ of the builder (the base image's own Triton)
    kernels: str  # kernels_digest of the sglx_kernels package that compiled them

    @property
    def target(self) -> str:
        return f"{self.backend}:{self.arch}:{self.warp_size}"

    def label(self) -> str:
        """The image label's value: one line an operator can read (`docker inspect`)."""
        return f"{self.target} triton={self.triton} kernels={self.kernels[:16]}"


@dataclass(frozen=True)
class Manifest:
    keys: tuple[CacheKey, ...]  # one per target compiled
    entries: tuple[str, ...]  # folder names under ENTRIES (Triton's cache keys)
    host_modules: tuple[str, ...]
    host_modules_skipped: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "keys": [asdict(k) for k in self.keys],
            "entries": list(self.entries),
            "host_modules": list(self.host_modules),
            "host_modules_skipped": self.host_modules_skipped,
        }

    def label(self) -> str:
        return "; ".join(k.label() for k in self.keys)


def kernels_digest(package_dir: Path) -> str:
    """sha256 over the sglx_kernels sources that decide what compiles, by relative path."""
    digest = hashlib.sha256()
    files = sorted({p for pattern in KERNEL_SOURCES for p in package_dir.glob(pattern)})
    for path in files:
        digest.update(path.relative_to(package_dir).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def kernels_package() -> Path | None:
    """The installed sglx_kernels package folder, found without importing it (and torch)."""
    spec = importlib.util.find_spec("sglx_kernels")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def installed_triton() -> str | None:
    """The version of the distribution that provides the `triton` package (PyPI's triton,
    AMD's build, or pytorch-triton-rocm), read from its metadata without importing it."""
    for name in importlib.metadata.packages_distributions().get("triton", []):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def read_manifest(root: Path) -> Manifest:
    """The manifest under `root`, refused (SglxError, naming the field) when its shape is not
    the one this sglx writes. It crossed the air gap inside the image: bounded, checked."""
    path = root / MANIFEST
    hint = "rebuild the image with `sglx image build`: its prebuilt Triton cache is damaged"
    data = read_json(path, what="prebuilt Triton cache manifest", max_bytes=MAX_MANIFEST_BYTES,
                     hint=hint)  # fmt: skip
    try:
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise ValueError(f"schema is {data.get('schema') if isinstance(data, dict) else data!r}"
                             f", not {SCHEMA}")  # fmt: skip
        keys = tuple(_key(k) for k in _list(data, "keys"))
        entries = tuple(_name(e, "entries") for e in _list(data, "entries"))
        modules = tuple(_name(m, "host_modules") for m in _list(data, "host_modules"))
        skipped = data.get("host_modules_skipped")
        if len(entries) > MAX_ENTRIES or not keys:
            raise ValueError(f"{len(entries)} entries and {len(keys)} keys")
        if skipped is not None and not isinstance(skipped, str):
            raise ValueError("host_modules_skipped is not a string")
    except (TypeError, ValueError) as exc:
        raise SglxError(f"{path}: {exc}", hint=hint, code="corrupt", path=str(path)) from None
    return Manifest(keys, entries, modules, skipped)


def _list(data: dict[str, Any], field: str) -> list[Any]:
    value = data.get(field)
    if not isinstance(value, list):
        raise ValueError(f"{field} is not a list")
    return value


def _name(value: Any, field: str) -> str:
    """One plain file or folder name (no separators, no dot names): it is joined to a path."""
    if not isinstance(value, str) or not value or "/" in value or value in {".", ".."}:
        raise ValueError(f"{field} holds {value!r}, not a plain name")
    if len(value) > 255 or not value.isprintable():
        raise ValueError(f"{field} holds a name that is not printable or too long")
    return value


def _key(value: Any) -> CacheKey:
    fields = {"backend": str, "arch": str, "warp_size": int, "triton": str, "kernels": str}
    if not isinstance(value, dict) or set(value) != set(fields):
        raise ValueError(f"keys holds {value!r}, not {sorted(fields)}")
    for name, kind in fields.items():
        if type(value[name]) is not kind:
            raise ValueError(f"keys.{name} is {value[name]!r}, not of type {kind.__name__}")
    return CacheKey(**value)


def mismatch(
    key: CacheKey, device_arches: set[str], triton: str | None, kernels: str
) -> str | None:
    """Why the entries of `key` must not be loaded here, or None when they fit every device."""
    if not device_arches:
        return f"no {key.backend} device was found to compare with {key.arch}"
    if device_arches != {key.arch}:
        return (
            f"built for {key.arch}, and this host's devices are {', '.join(sorted(device_arches))}"
        )
    if triton != key.triton:
        return f"built with Triton {key.triton}, and this image runs Triton {triton}"
    if kernels != key.kernels:
        return "built from other sglx_kernels sources than the ones installed"
    return None
