"""`sglx image build`: the per-arch serving image, through the Docker SDK, with no network.

Order of work, each step failing fast with what to do:
1. the profile, its committed Dockerfile (must not be stale) and its lock (must not be stale,
   must not replace the base's packages);
2. the wheelhouse: every locked wheel present with its sha256 (else the wheel is named);
3. the base image (else how to get it offline, from the profile);
4. the weights: the given model converted for the arch (or a generated demo model), with a
   manifest;
5. wheels and weights imported as images, sglx's own packages built as wheels into a small
   context, and `docker build` with network_mode=none, streaming progress.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sglx import __version__
from sglx.engine import docker_client
from sglx.errors import SglxError
from sglx.image import payload
from sglx.image.render import dockerfile_path, stale
from sglx.profile import Profile
from sglx.profile.loader import display_path
from sglx.progress import Progress
from sglx.report import Result, Table
from sglx.util import scratch_dir
from sglx.wheels import wheelhouse
from sglx.wheels.steps import default_wheelhouse, load_lock, lock_path

BUILD_TIMEOUT_S = 3600
# sglx, sglx-platform and sglx-kernels: the files each wheel is built from.
DISTRIBUTIONS = {
    "sglx": ("pyproject.toml", "README.md", "scripts"),
    "sglx-platform": ("plugin",),
    "sglx-kernels": ("kernels",),
}
BUILD_LITTER = ("build", "dist", "*.egg-info", "__pycache__", "*.pyc")


@dataclass(frozen=True)
class Model:
    path: Path
    name: str
    digest: str  # the weights manifest digest
    demo: bool


def build_image(
    profile: Profile,
    *,
    base: str | None,
    model: Path | None,
    tag: str | None,
    wheels: Path | None,
    progress: Progress,
    no_cache: bool = False,
) -> Result:
    arch = profile.arch
    if stale(arch):
        raise SglxError(
            f"{display_path(dockerfile_path(arch))} is stale or missing",
            hint="run `sglx image render` (and commit the result)",
            code="dockerfile_stale",
        )
    lock = load_lock(profile)
    if profile.sglang.wheel == "source" and lock.header.get("sglang") != "pinned":
        raise SglxError(
            f"the {arch} lock pins no sglang wheel: {arch} serves with sglang "
            f"{profile.sglang.version} built from source for Python {profile.python.version}",
            hint=f"build the wheel on a connected machine, then `sglx wheels lock --arch {arch} "
            "--find-links DIR` and `sglx wheels fetch`",
            code="lock_incomplete",
        )
    folder = wheels or default_wheelhouse(arch)
    progress(f"checking {len(lock.wheels)} wheels in {folder} against {lock_path(arch).name}")
    wheelhouse.require_complete(lock, folder, progress)
    client = docker_client(timeout=BUILD_TIMEOUT_S)
    base_ref = base or profile.base.ref
    base_image = _require_base(client, profile, base_ref)
    tag = tag or f"sglx/{arch}:latest"
    with scratch_dir("sglx-build-") as scratch:
        weights = _prepare_model(profile, model, scratch, progress)
        reuse = not no_cache
        wheels_image = payload.wheelhouse_image(
            client, lock, lock_path(arch), folder, progress, reuse=reuse
        )
        weights_image = payload.weights_image(
            client, weights.path, weights.digest, progress, reuse=reuse
        )
        context = scratch / "context"
        _write_context(profile, weights.name, context, progress)
        labels = _labels(profile, lock.digest, len(lock.wheels), weights, base_ref, base_image)
        progress(f"docker build {tag} (no network)")
        image_id = _docker_build(
            client,
            no_cache,
            context,
            tag,
            {
                "BASE": base_ref,
                "WHEELHOUSE": wheels_image.tag,
                "WEIGHTS": weights_image.tag,
            },
            labels,
            progress,
        )
    image = client.images.get(image_id)
    layers = _layer_table(image)
    size = image.attrs["Size"]
    summary = Table(
        ("tag", "image id", "size", "model"),
        (
            (
                tag,
                image.id,
                f"{size / 1e9:.2f} GB",
                f"{weights.name}{' (demo)' if weights.demo else ''}",
            ),
        ),
    )
    return Result(
        command=("image", "build"),
        data={
            "tag": tag,
            "id": image.id,
            "size_bytes": size,
            "labels": labels,
            "payload_images": [wheels_image.tag, weights_image.tag],
            # imported by this build (not reused): what a caller that cleans up may remove
            "payload_images_imported": [p.tag for p in (wheels_image, weights_image) if p.imported],
            "layers": [dict(zip(("created_by", "size"), row, strict=True)) for row in layers.rows],
        },
        tables=(summary, layers),
    )


def _require_base(client: Any, profile: Profile, ref: str) -> Any:
    from docker.errors import ImageNotFound

    try:
        image = client.images.get(ref)
    except ImageNotFound:
        how = (
            ("sglx base build --arch " + profile.arch)
            if profile.base.source == "build"
            else (profile.base.obtain)
        )
        raise SglxError(
            f"base image {ref} is not in the engine", hint=how, code="base_missing"
        ) from None
    if profile.base.digest and image.id != profile.base.digest:
        raise SglxError(
            f"base image {ref} is {image.id}, the profile pins {profile.base.digest}",
            hint="load the base the profile pins (sglx base load FILE)",
            code="base_mismatch",
        )
    return image


def _prepare_model(
    profile: Profile, model: Path | None, scratch: Path, progress: Progress
) -> Model:
    from sglx.weights.convert import convert_weights
    from sglx.weights.manifest import MANIFEST_NAME, manifest_digest, read_manifest

    demo = model is None
    if model is None:
        from sglx.demo_model import make_demo_model

        progress("no --model given: generating the sglx demo model (random weights)")
        model = make_demo_model(scratch / "demo")
    elif not model.is_dir():
        raise SglxError(
            f"--model {model}: no such folder",
            code="usage",
            hint="pass a Hugging Face checkpoint folder (config.json, *.safetensors)",
        )
    name = "demo" if demo else model.name
    if (model / MANIFEST_NAME).is_file() and read_manifest(model).arch == profile.arch:
        progress(f"{model} is already converted for {profile.arch}")
        converted = model
    else:
        converted = scratch / "converted"
        progress(f"converting {name} to {profile.weights.dtype} for {profile.arch}")
        convert_weights(model, converted, profile, progress=progress)
    return Model(converted, name, manifest_digest(converted), demo)


def _write_context(profile: Profile, model_name: str, context: Path, progress: Progress) -> None:
    """The small build context: the Dockerfile, the resolved profile and sglx's own wheels."""
    (context / "etc").mkdir(parents=True)
    shutil.copy2(dockerfile_path(profile.arch), context / "Dockerfile")
    (context / "etc" / "arch.yaml").write_text(
        f"# sglx arch profile {profile.arch}, resolved (shared fragments merged in)\n"
        + yaml.safe_dump(profile.to_json(), sort_keys=False)
    )
    (context / "etc" / "model-name").write_text(model_name + "\n")
    progress("building the sglx, sglx-platform and sglx-kernels wheels")
    build_own_wheels(context / "sglx-wheels", context.parent / "src")


def build_own_wheels(dest: Path, scratch: Path) -> list[Path]:
    """Wheels of sglx's three distributions, built from clean copies of their sources (an
    in-tree build would leave build/ folders whose stale files end up in later wheels)."""
    root = source_root()
    sources = []
    for name, parts in DISTRIBUTIONS.items():
        copy = scratch / name
        for part in parts:
            source = root / part
            if source.is_dir():
                shutil.copytree(
                    source,
                    copy / part if len(parts) > 1 else copy,
                    ignore=shutil.ignore_patterns(*BUILD_LITTER),
                )
            else:
                copy.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, copy / part)
        sources.append(copy)
    # Fixed zip timestamps: unchanged sources give identical wheels, so the engine's layer
    # cache holds across rebuilds.
    env = {**os.environ, "SOURCE_DATE_EPOCH": "315532800"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "--quiet",
            "--wheel-dir",
            str(dest),
            *(str(s) for s in sources),
        ],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    if proc.returncode != 0:
        raise SglxError(
            "building sglx's own wheels failed:\n" + proc.stderr[-2000:],
            hint="run `make setup` (setuptools >= 77 in the venv)",
            code="environment",
        )
    return sorted(dest.glob("*.whl"))


def _labels(
    profile: Profile, lock_digest: str, wheels: int, model: Model, base_ref: str, base_image: Any
) -> dict[str, str]:
    profile_json = yaml.safe_dump(profile.to_json(), sort_keys=True).encode()
    return {
        "org.opencontainers.image.created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "org.opencontainers.image.version": __version__,
        "org.opencontainers.image.revision": _revision(),
        "org.opencontainers.image.source": "sglx",
        "org.opencontainers.image.vendor": "sglx",
        "org.opencontainers.image.licenses": "Apache-2.0",
        "org.opencontainers.image.base.name": base_ref,
        "org.opencontainers.image.base.digest": base_image.id,
        "io.sglx.arch": profile.arch,
        "io.sglx.sglang.version": profile.sglang.version,
        "io.sglx.lock.digest": lock_digest,
        "io.sglx.lock.wheels": str(wheels),
        "io.sglx.weights.digest": model.digest,
        "io.sglx.model.name": model.name,
        "io.sglx.model.demo": "true" if model.demo else "false",
        "io.sglx.profile.digest": "sha256:" + hashlib.sha256(profile_json).hexdigest(),
    }


def source_root() -> Path:
    """The checkout this sglx runs from (its own distributions are built from it)."""
    return Path(__file__).resolve().parents[3]


def _revision() -> str:
    root = source_root()
    try:
        rev = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{rev}-dirty" if dirty else rev


def _docker_build(
    client: Any,
    no_cache: bool,
    context: Path,
    tag: str,
    buildargs: dict[str, str],
    labels: dict[str, str],
    progress: Progress,
) -> str:
    tail: list[str] = []
    image_id = ""
    stream = client.api.build(
        path=str(context),
        tag=tag,
        nocache=no_cache,
        buildargs=buildargs,
        labels=labels,
        network_mode="none",
        rm=True,
        forcerm=True,
        pull=False,
        decode=True,
    )
    for chunk in stream:
        if "error" in chunk:
            detail = chunk.get("errorDetail", {}).get("message", chunk["error"])
            raise SglxError(
                f"docker build of {tag} failed: {detail.strip()}\n    " + "\n    ".join(tail[-15:]),
                hint=_build_hint(tail),
                code="build_failed",
            )
        if "aux" in chunk and "ID" in chunk["aux"]:
            image_id = chunk["aux"]["ID"]
        for line in chunk.get("stream", "").splitlines():
            line = line.rstrip()
            if not line:
                continue
            tail = [*tail[-40:], line]
            if line.startswith("Step ") or line.startswith(" ---> Using cache"):
                progress(line.strip())
    if not image_id:
        image_id = client.images.get(tag).id
    return image_id


def _build_hint(tail: list[str]) -> str:
    text = "\n".join(tail)
    if "DO NOT MATCH THE HASHES" in text or "hash" in text.lower():
        return (
            "a wheel does not match the lock: check the wheelhouse with `sglx wheels "
            "verify` and re-fetch it"
        )
    return "the lines above come from the step that failed"


def _layer_table(image: Any) -> Table:
    rows = []
    for entry in reversed(image.history()):
        created_by = entry.get("CreatedBy", "")
        if not created_by:
            instruction = "(base image layer)"
        elif "#(nop)" in created_by:
            instruction = created_by.split("#(nop) ")[-1].strip()
        else:
            instruction = "RUN " + created_by.removeprefix("/bin/sh -c ").strip()
        if entry.get("Size", 0) == 0 and not instruction.startswith("RUN"):
            continue
        rows.append((instruction[:90], f"{entry.get('Size', 0) / 1e6:,.1f} MB"))
    return Table(("layer", "size"), tuple(rows), title="layers (oldest first)")
