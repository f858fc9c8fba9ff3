"""Prebuilt Triton caches: compiled into the image at build, copied into the node-local cache
at start when they fit the device.

Why: a restart, and every host of a rollout, otherwise pays the whole JIT again (on AMD a
first step has taken minutes). The kernels' cache entries need no device to make
(sglx_kernels.warm), so `sglx image build` runs `build` inside the image, with the base's own
Triton and the baked model's shapes, and the server's start runs `install`:

- `build`: one child per target (`python -m sglx_kernels.warm`), for the profile's gfx targets
  (devices.probe) and the model's layer widths at each tensor-parallel size the arch's serving
  profiles use; then the manifest (sglx_core.triton_cache) and a read-only tree.
- `install`: the manifest's key against the running devices, Triton and kernels; entries
  copied only on a match, each folder whole or not at all, and never over an existing one.
  A mismatch is reported and nothing is copied: Triton would otherwise be handed code objects
  built for another device.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglx_core.errors import SglxError
from sglx_core.profile import Profile
from sglx_core.profile.schema import KfdProbe
from sglx_core.serving.kfd import gfx_name, kfd_gpus
from sglx_core.serving.model import ModelShape, read_model
from sglx_core.serving.probe_root import probe_root
from sglx_core.triton_cache import (
    ENTRIES,
    IMAGE_ROOT,
    MANIFEST,
    SPEC,
    CacheKey,
    Manifest,
    installed_triton,
    kernels_digest,
    kernels_package,
    mismatch,
    read_manifest,
)
from sglx_core.untrusted import read_json

DEFAULT_TRITON_CACHE = "~/.triton/cache"
# config.json hidden_act -> the sglx op that serves it (sglang's activation table, the gated
# ones: wheel:srt/layers/activation.py)
ACTIVATIONS = {
    "silu": "silu",
    "swish": "silu",
    "gelu": "gelu",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_new": "gelu_tanh",
}


def targets(profile: Profile) -> list[str]:
    """`backend:arch:warp` of every device target the profile's prebuilt cache is for."""
    spec, probe = profile.kernels.prebuilt_cache, profile.devices.probe
    if spec is None or not isinstance(probe, KfdProbe):
        return []
    return [
        f"{spec.backend}:{gfx_name(v)}:{profile.kernels.warp_size}"
        for v in probe.gfx_target_versions
    ]


def layer_shapes(profile: Profile, model: Path) -> list[dict[str, Any]]:
    """The model's layer widths on one rank, at each TP size the serving profiles use."""
    shape = read_model(model)
    activation = _activation(model)
    tps = sorted({int(p.args.get("tp", 1)) for p in profile.serving.profiles.values()} | {1})
    shapes = []
    for tp in tps:
        if shape.attention_heads % tp:
            continue  # sglang refuses this TP for the model; nothing to compile
        shapes.append(_per_rank(shape, tp, activation))
    return [dict(s) for s in {json.dumps(s, sort_keys=True): s for s in shapes}.values()]


def _per_rank(shape: ModelShape, tp: int, activation: str) -> dict[str, Any]:
    rotary = shape.qk_rope_head_dim or shape.head_dim
    return {
        "hidden_size": shape.hidden_size,
        "head_dim": shape.head_dim,
        "heads": shape.attention_heads // tp,
        "kv_heads": max(1, shape.kv_heads // tp),
        "intermediate_size": shape.intermediate_size // tp,
        "rotary_dim": rotary,
        "max_positions": shape.max_position_embeddings or 4096,
        "activation": activation,
    }


def _activation(model: Path) -> str:
    config = read_json(model / "config.json", what="model config", max_bytes=4 << 20)
    act = config.get("hidden_act") or config.get("hidden_activation") or "silu"
    text = config.get("text_config")
    if isinstance(text, dict):
        act = text.get("hidden_act") or act
    return ACTIVATIONS.get(str(act), "silu")


def build(profile: Profile, model: Path, out: Path) -> Manifest:
    """Compile the profile's targets into `out` (ENTRIES/ and MANIFEST); the tree is left
    read-only. Raises SglxError naming what failed."""
    spec = profile.kernels.prebuilt_cache
    if spec is None:
        raise SglxError(f"the {profile.arch} profile has no kernels.prebuilt_cache",
                        hint="nothing to build for this arch", code="usage")  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    spec_file = out / SPEC
    spec_file.write_text(json.dumps({
        "dtype": read_model(model).dtype,
        "tokens": list(spec.tokens),
        "shapes": layer_shapes(profile, model),
    }, indent=1) + "\n")  # fmt: skip
    reports = [_compile(target, spec_file, out / ENTRIES) for target in targets(profile)]
    package = kernels_package()
    digest = kernels_digest(package) if package else ""
    keys = []
    for report in reports:
        backend, arch, warp = report["target"].split(":")
        keys.append(CacheKey(backend, arch, int(warp), installed_triton() or "", digest))
    modules = sorted({m for r in reports for m in r["host_modules"]})
    skipped = "; ".join(sorted({r["host_modules_skipped"] for r in reports
                                if r["host_modules_skipped"]})) or None  # fmt: skip
    entries = sorted(p.name for p in (out / ENTRIES).iterdir() if p.is_dir())
    manifest = Manifest(tuple(keys), tuple(entries), tuple(modules), skipped)
    (out / MANIFEST).write_text(json.dumps(manifest.to_json(), indent=1) + "\n")
    _read_only(out)
    return manifest


def _compile(target: str, spec_file: Path, cache: Path) -> dict[str, Any]:
    env = {**os.environ, "TRITON_CACHE_DIR": str(cache)}
    done = subprocess.run(
        [sys.executable, "-m", "sglx_kernels.warm", "--target", target, "--spec", str(spec_file)],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SglxError(
            f"compiling sglx's Triton kernels for {target} failed (exit {done.returncode}):\n"
            + done.stderr.strip()[-3000:],
            hint="the base's Triton must compile for this target; run `python -m "
            "sglx_kernels.warm --help` in the base to see its error",
            code="build_failed",
        )
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def _read_only(root: Path) -> None:
    for folder, _dirs, files in os.walk(root):
        for name in files:
            (Path(folder) / name).chmod(0o444)
        Path(folder).chmod(0o555)


@dataclass(frozen=True)
class Installed:
    """What `install` did: `copied` and `present` entries, or why it copied none."""

    copied: int
    present: int
    key: CacheKey | None
    skipped: str | None  # why nothing was copied; None when the cache fits

    def line(self) -> str:
        if self.skipped is not None:
            return f"prebuilt Triton cache not used: {self.skipped}"
        assert self.key is not None
        return (
            f"prebuilt Triton cache ({self.key.label()}): {self.copied} entries copied, "
            f"{self.present} already in place"
        )


def triton_cache_dir() -> Path:
    return Path(os.environ.get("TRITON_CACHE_DIR") or DEFAULT_TRITON_CACHE).expanduser()


def device_arches(profile: Profile, root: Path | None = None) -> set[str]:
    """The gfx names of the KFD GPUs this process sees (empty off ROCm)."""
    if not isinstance(profile.devices.probe, KfdProbe):
        return set()
    return {gfx_name(gpu.gfx_target_version) for gpu in kfd_gpus(root or probe_root())}


def install(
    profile: Profile,
    cache: Path,
    *,
    image_root: Path = Path(IMAGE_ROOT),
    arches: set[str] | None = None,
) -> Installed:
    """Copy the image's prebuilt entries into `cache` when their key fits this host."""
    if not (image_root / MANIFEST).exists():
        return Installed(0, 0, None, f"this image carries none ({image_root} is absent)")
    manifest = read_manifest(image_root)
    try:
        found = device_arches(profile) if arches is None else arches
    except SglxError as error:
        return Installed(0, 0, None, f"the devices could not be read ({error})")
    package = kernels_package()
    digest = kernels_digest(package) if package else ""
    triton = installed_triton()
    reasons = []
    for key in manifest.keys:
        reason = mismatch(key, found, triton, digest)
        if reason is None:
            copied, present = _copy_entries(manifest, image_root / ENTRIES, cache)
            return Installed(copied, present, key, None)
        reasons.append(f"{key.target}: {reason}")
    return Installed(0, 0, None, "; ".join(reasons))


def _copy_entries(manifest: Manifest, source: Path, cache: Path) -> tuple[int, int]:
    """Each entry folder lands whole (copied aside, then renamed into place) or not at all;
    an entry already there is kept (another rank, or an earlier start, put it there)."""
    cache.mkdir(parents=True, exist_ok=True)
    copied = present = 0
    for entry in manifest.entries:
        target = cache / entry
        if target.exists():
            present += 1
            continue
        staging = Path(tempfile.mkdtemp(prefix=f".{entry}.", dir=cache))
        try:
            for item in (source / entry).iterdir():
                if item.is_file() and not item.is_symlink():
                    shutil.copyfile(item, staging / item.name)
            staging.rename(target)
            copied += 1
        except OSError:
            if not target.exists():
                raise
            present += 1
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return copied, present


def main(argv: list[str] | None = None) -> int:
    """`python -m sglx_runtime.warm_cache build MODEL OUT`: the image build's step (the profile
    is the baked one, SGLX_PROFILE)."""
    from sglx_platform.image_profile import baked_profile

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 3 or args[0] != "build":
        print(main.__doc__, file=sys.stderr)
        return 2
    try:
        manifest = build(baked_profile(), Path(args[1]), Path(args[2]))
    except SglxError as error:
        print(f"sglx warm cache: {error}", file=sys.stderr)
        return 2
    modules = ", ".join(manifest.host_modules) or manifest.host_modules_skipped
    print(f"sglx warm cache: {len(manifest.entries)} entries for {manifest.label()}; "
          f"host modules: {modules}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
