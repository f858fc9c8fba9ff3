"""`sglx image build`: the per-arch serving image, through the Docker SDK, with no network.

Order of work, cheap local checks first, each step failing fast with what to do:
1. the profile, its committed Dockerfile (must not be stale) and its lock (must not be stale,
   must not replace the base's packages);
2. the --model folder: a checkpoint with config.json and sound safetensors headers (no byte of
   weights read yet, no engine contacted);
3. the wheelhouse: every locked wheel present with its sha256 (else the wheel is named);
4. the engine and the base image (else how to get it offline, from the profile), and what
   the base declares it ships, read in a throwaway container of it (base_probe): a base with
   another Python, (sglang.wheel 'base') another sglang, or a ROCm outside base.rocm than the
   profile's is refused, naming both values;
5. the weights: the given model converted for the arch (or a generated demo model), with a
   manifest;
6. the venv: the locked wheels installed into the base in a container with no network and
   committed as the deps image (deps.py; reused when base, lock and script are the same), the
   weights imported as an image, sglx's own packages built as wheels into a small context, and
   `docker build` FROM the deps image with network_mode=none, streaming progress;
7. older deps images of the arch on the same base that no tagged image is built on are removed
   (prune.replace_deps), so builds do not pile up GBs of them.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglx import __version__, image_labels
from sglx.engine import docker_client, read_image_file
from sglx.image import build_log, deps, payload, prune, weights_outside
from sglx.image.render import dockerfile_path, render_deps_script, stale_files
from sglx.progress import Progress
from sglx.wheels import wheelhouse
from sglx.wheels.steps import default_wheelhouse, load_lock, lock_path
from sglx_core import base_facts, base_probe, triton_cache
from sglx_core.errors import SglxError
from sglx_core.gate.golden import (
    BUILTIN_PROMPTS,
    GOLDEN_FILE,
    Prompt,
    file_digest,
    load_golden,
    read_prompts,
)
from sglx_core.paths import source_root
from sglx_core.profile import Profile
from sglx_core.profile.loader import display_path
from sglx_core.profile.resolved import profile_digest, resolved_text
from sglx_core.report import Result, Table
from sglx_core.scratch import scratch_dir
from sglx_core.weights_store import OUTSIDE_LABEL

BUILD_TIMEOUT_S = 3600
# sglx, sglx-platform, sglx-runtime and sglx-kernels: the files each wheel is built from.
DISTRIBUTIONS = {
    "sglx": ("pyproject.toml", "README.md", "scripts"),
    "sglx-platform": ("plugin",),
    "sglx-runtime": ("runtime",),
    "sglx-kernels": ("kernels",),
}
BUILD_LITTER = ("build", "dist", "*.egg-info", "__pycache__", "*.pyc")


@dataclass(frozen=True)
class Model:
    path: Path
    name: str
    digest: str  # the weights manifest digest
    demo: bool
    source: Path  # the checkpoint before conversion: the golden numerics' reference


def build_image(
    profile: Profile,
    *,
    base: str | None,
    model: Path | None,
    tag: str | None,
    wheels: Path | None,
    progress: Progress,
    no_cache: bool = False,
    weights_outside_above: str | None = None,
    models_root: Path | None = None,
    golden_prompts: Path | None = None,
    golden: Path | None = None,
) -> Result:
    arch = profile.arch
    outside_limit = weights_outside.threshold(profile, weights_outside_above)
    if stale := stale_files(arch):
        raise SglxError(
            f"{', '.join(display_path(path) for path in stale)} stale or missing",
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
    if model is not None:
        check_model(model)
    prompts = BUILTIN_PROMPTS + (read_prompts(golden_prompts) if golden_prompts else ())
    if golden is not None:
        load_golden(golden)  # a bad file fails here, before any slow step
    folder = wheels or default_wheelhouse(arch)
    progress(f"checking {len(lock.wheels)} wheels in {folder} against {lock_path(arch).name}")
    wheelhouse.require_complete(lock, folder, progress)
    client = docker_client(timeout=BUILD_TIMEOUT_S)
    base_ref = base or profile.base.ref
    base_image = _require_base(client, profile, base_ref)
    progress(f"reading what {base_ref} ships (pip metadata, ROCm's version file)")
    probe = probe_base(client, profile, base_ref)
    facts = _check_base(profile, base_ref, probe)
    vendor = base_facts.vendor_release(profile, probe)
    if vendor is not None and not vendor.validated:
        progress(f"warning: {vendor.message()}")
    tag = tag or f"sglx/{arch}:latest"
    with scratch_dir("sglx-build-") as scratch:
        weights = _prepare_model(profile, model, scratch, progress)
        kept = weights_outside.keep(
            profile, weights.path, weights.digest, outside_limit, models_root, progress
        )
        reuse = not no_cache
        deps_image = deps.deps_image(
            client,
            arch=arch,
            base_ref=base_ref,
            base_image=base_image,
            lock=lock,
            lock_file=lock_path(arch),
            wheelhouse=folder,
            script=render_deps_script(profile),
            timeout_s=BUILD_TIMEOUT_S,
            progress=progress,
            reuse=reuse,
        )
        weights_image = payload.weights_image(
            client, weights.path, weights.digest, progress, reuse=reuse, outside=kept is not None
        )
        context = scratch / "context"
        _write_context(profile, weights.name, context, progress)
        _write_base_report(profile, base_ref, base_image.id, probe, facts, context)
        golden_digest = _write_golden(weights, golden, prompts, context, progress)
        labels = _labels(profile, lock.digest, len(lock.wheels), weights, base_ref, base_image)
        labels[image_labels.GOLDEN_DIGEST] = golden_digest
        labels.update(base_facts.labels(facts))
        if vendor is not None:
            labels[f"io.sglx.vendor.{vendor.distribution}"] = vendor.found or "none"
            labels["io.sglx.vendor.validated"] = str(vendor.validated).lower()
        if kept is not None:
            labels[OUTSIDE_LABEL] = "true"
        progress(f"docker build {tag} (no network)")
        image_id = docker_build(
            client,
            no_cache,
            context,
            tag,
            {"DEPS": deps_image.tag, "WEIGHTS": weights_image.tag},
            labels,
            progress,
        )
    if profile.kernels.prebuilt_cache is not None:
        labels[triton_cache.LABEL] = _prebuilt_cache_label(client, image_id)
        image_id = _relabel(client, image_id, tag, labels, progress)
    image = client.images.get(image_id)
    deps_id = client.images.get(deps_image.tag).id
    replaced = prune.replace_deps(
        client, arch, keep=deps_id, base_id=base_image.id, progress=progress
    )
    layers = _layer_table(image)
    size = image.attrs["Size"]
    summary = Table(
        ("tag", "image id", "size", "model"),
        (
            (
                tag,
                image.id,
                f"{size / 1e9:.2f} GB",
                f"{weights.name}{' (demo)' if weights.demo else ''}"
                + ("" if kept is None else f" (outside the image: {kept})"),
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
            "payload_images": [deps_image.tag, weights_image.tag],
            "weights_outside": None if kept is None else str(kept),
            # imported by this build (not reused): what a caller that cleans up may remove
            "payload_images_imported": [p.tag for p in (deps_image, weights_image) if p.imported],
            # the deps image the serving image is built on, and the older ones removed
            "deps_image": deps_id,
            "deps_images_removed": [item.to_json() for item in replaced],
            "layers": [dict(zip(("created_by", "size"), row, strict=True)) for row in layers.rows],
            # The vendor platform package of the base against the sglang its vendor runs it with
            "vendor": None if vendor is None else vendor.to_json(),
        },
        tables=(summary, layers),
        lines=() if vendor is None or vendor.validated else (f"warning: {vendor.message()}",),
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
            f"base image {ref} is not in the engine",
            hint=how + _tag_pattern(profile),
            code="base_missing",
        ) from None
    if profile.base.digest and image.id != profile.base.digest:
        raise SglxError(
            f"base image {ref} is {image.id}, the profile pins {profile.base.digest}",
            hint="load the base the profile pins (sglx base load FILE)",
            code="base_mismatch",
        )
    return image


def probe_base(client: Any, profile: Profile, ref: str) -> dict[str, Any]:
    """What the base declares (base_probe.py run by the base's own Python, no network)."""
    from docker.errors import APIError, ContainerError

    source = Path(base_probe.__file__).read_text()
    try:
        out = client.containers.run(
            ref,
            ["-c", source, "probe"],
            entrypoint=[profile.python.executable],
            user="root",
            network_mode="none",
            remove=True,
            stdout=True,
            stderr=False,
        )
        probe: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    except (ContainerError, APIError, ValueError, IndexError) as exc:
        raise SglxError(
            f"could not read what base image {ref} ships with {profile.python.executable}: "
            f"{str(exc).strip()[-500:]}",
            hint="python.executable in the profile must be the base's interpreter",
            code="base_unusable",
        ) from None
    return probe


def _check_base(profile: Profile, ref: str, probe: dict[str, Any]) -> list[base_facts.Fact]:
    facts = base_facts.compare(profile, probe)
    by_name = {f.name: f for f in facts}
    python = by_name["python"]
    if python.matches is False:
        raise SglxError(
            f"base image {ref} has Python {python.found} at {probe.get('executable')}; the "
            f"{profile.arch} profile and its lock are for Python {python.expected}",
            hint="load the base the profile names, or set python.version (and relock)",
            code="base_python_mismatch",
        )
    sglang = by_name["sglang"]
    if sglang.matches is False:
        shown = f"sglang {sglang.found}" if sglang.found else "no sglang"
        raise SglxError(
            f"base image {ref} ships {shown}; this sglx's plugin supports sglang {sglang.expected}",
            hint=f"load the upstream image of sglang {sglang.expected} ({profile.base.obtain})"
            + _tag_pattern(profile),
            code="base_sglang_mismatch",
        )
    rocm = by_name["rocm"]
    if rocm.matches is False:
        # The base's own kernels (AITER, sgl-kernel, torch) are built for its ROCm, and the
        # profile's env, scan rules and host driver floor for the profile's.
        shown = f"ROCm {rocm.found}" if rocm.found else "no ROCm release it declares"
        raise SglxError(
            f"base image {ref} has {shown}; the {profile.arch} profile is for ROCm {rocm.expected}",
            hint=f"load the base the profile names ({profile.base.obtain}), or use a profile "
            "for that ROCm",
            code="base_rocm_mismatch",
        )
    return facts


def _tag_pattern(profile: Profile) -> str:
    """The hint's tail naming the tags to look for, where upstream publishes only dated ones."""
    pattern = profile.base.tag_pattern
    return "" if pattern is None else f"; upstream publishes only dated tags: look for {pattern}"


def _write_base_report(
    profile: Profile,
    ref: str,
    image_id: str,
    probe: dict[str, Any],
    facts: list[base_facts.Fact],
    context: Path,
) -> None:
    """etc/base.json (-> /etc/sglx/base.json): the base the image was built on, for preflight;
    Deterministic, so the layer cache holds."""
    report = {
        "ref": ref,
        "digest": image_id,
        "python": probe.get("python"),
        "executable": probe.get("executable"),
        "facts": [f.to_json() for f in facts],
        "missing_provided": base_facts.missing_provided(profile, probe),
    }
    (context / "etc" / "base.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")


def _prepare_model(
    profile: Profile, model: Path | None, scratch: Path, progress: Progress
) -> Model:
    from sglx.weights.convert import convert_weights
    from sglx_core.weights_manifest import MANIFEST_NAME, manifest_digest, read_manifest

    demo = model is None
    if model is None:
        from sglx.demo_model import make_demo_model

        progress("no --model given: generating the sglx demo model (random weights)")
        model = make_demo_model(scratch / "demo")
    name = "demo" if demo else model.name
    if (model / MANIFEST_NAME).is_file() and read_manifest(model).arch == profile.arch:
        progress(f"{model} is already converted for {profile.arch}")
        converted = model
    else:
        converted = scratch / "converted"
        progress(f"converting {name} to {profile.weights.dtype} for {profile.arch}")
        convert_weights(model, converted, profile, progress=progress)
    return Model(converted, name, manifest_digest(converted), demo, model)


def _write_golden(
    model: Model, given: Path | None, prompts: tuple[Prompt, ...], context: Path, progress: Progress
) -> str:
    """The golden file at the image's etc/ (beside the baked profile): `given`, or computed
    from the source checkpoint with transformers on CPU in float32. Returns its digest."""
    dest = context / "etc" / GOLDEN_FILE
    if given is not None:
        progress(f"using the golden file {given}")
        shutil.copyfile(given, dest)
        load_golden(dest)
        digest = file_digest(dest)
    else:
        progress(
            f"computing the golden numerics of {model.name}: {len(prompts)} prompts, "
            "transformers on CPU in float32"
        )
        from sglx.gate.golden_build import build_golden_file

        digest = build_golden_file(model.source, dest, prompts, weights_digest=model.digest)
    # COPY keeps the mode: the replay runs as the image's user, and the file is written 0600.
    dest.chmod(0o644)
    return digest


def check_model(model: Path) -> None:
    """Fail before any slow step unless `model` looks like a checkpoint sglx can convert:
    a folder with config.json and sound safetensors headers (only headers are read)."""
    from sglx.weights.checkpoint import CONFIG_NAME, read_checkpoint

    hint = "pass a Hugging Face checkpoint folder (config.json, *.safetensors)"
    if not model.is_dir():
        raise SglxError(f"--model {model}: no such folder", code="usage", hint=hint)
    if not (model / CONFIG_NAME).is_file():
        raise SglxError(
            f"--model {model}: no {CONFIG_NAME} in the folder, so it is not a model checkpoint",
            code="usage",
            hint=hint,
            path=str(model / CONFIG_NAME),
        )
    read_checkpoint(model)


def _write_context(profile: Profile, model_name: str, context: Path, progress: Progress) -> None:
    """The small build context: the Dockerfile, the resolved profile and sglx's own wheels."""
    (context / "etc").mkdir(parents=True)
    shutil.copy2(dockerfile_path(profile.arch), context / "Dockerfile")
    (context / "etc" / "arch.yaml").write_text(resolved_text(profile))
    (context / "etc" / "model-name").write_text(model_name + "\n")
    progress("building the sglx, sglx-platform, sglx-runtime and sglx-kernels wheels")
    build_own_wheels(context / "sglx-wheels", context.parent / "src")


def build_own_wheels(
    dest: Path, scratch: Path, names: Sequence[str] = tuple(DISTRIBUTIONS)
) -> list[Path]:
    """Wheels of sglx's distributions (all four unless `names` says which), built from clean
    copies of their sources (an in-tree build would leave build/ folders whose stale files end
    up in later wheels)."""
    root = source_root()
    sources = []
    for name in names:
        parts = DISTRIBUTIONS[name]
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
    return {
        image_labels.CREATED: dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        image_labels.VERSION: __version__,
        image_labels.REVISION: _revision(),
        "org.opencontainers.image.source": "sglx",
        "org.opencontainers.image.vendor": "sglx",
        "org.opencontainers.image.licenses": "Apache-2.0",
        image_labels.BASE_NAME: base_ref,
        image_labels.BASE_DIGEST: base_image.id,
        image_labels.ARCH: profile.arch,
        image_labels.SGLANG_VERSION: profile.sglang.version,
        image_labels.LOCK_DIGEST: lock_digest,
        image_labels.LOCK_WHEELS: str(wheels),
        image_labels.WEIGHTS_DIGEST: model.digest,
        image_labels.MODEL_NAME: model.name,
        image_labels.MODEL_DEMO: "true" if model.demo else "false",
        image_labels.PROFILE_DIGEST: profile_digest(profile),
    }


def _prebuilt_cache_label(client: Any, image_id: str) -> str:
    """What the image's prebuilt Triton cache is keyed by, from the manifest the build wrote."""
    path = f"{triton_cache.IMAGE_ROOT}/{triton_cache.MANIFEST}"
    raw = read_image_file(client, image_id, path, triton_cache.MAX_MANIFEST_BYTES)
    if raw is None:
        raise SglxError(
            f"the image holds no prebuilt Triton cache manifest at {path}",
            hint="the build's sglx_runtime.warm_cache step did not run: rebuild with --no-cache",
            code="build_failed",
        )
    with scratch_dir("sglx-triton-cache-") as scratch:
        (scratch / triton_cache.MANIFEST).write_bytes(raw)
        return triton_cache.read_manifest(scratch).label()


def _relabel(
    client: Any, image_id: str, tag: str, labels: dict[str, str], progress: Progress
) -> str:
    """The image with `labels` added: a label-only step on top (its config changes, no layer
    does), because the key of the prebuilt cache is known only once the build has made it."""
    progress(f"labelling {tag} with its prebuilt Triton cache key")
    return docker_build(client, False, f"FROM {image_id}\n", tag, {}, labels, progress)


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


def docker_build(
    client: Any,
    no_cache: bool,
    context: Path | str,
    tag: str,
    buildargs: dict[str, str],
    labels: dict[str, str],
    progress: Progress,
) -> str:
    """Run the build of the folder `context` (or of a Dockerfile's text, with no context);
    return the image id."""
    import io

    tail = build_log.Tail()
    image_id = ""
    source: dict[str, Any] = (
        {"path": str(context)}
        if isinstance(context, Path)
        else {"fileobj": io.BytesIO(context.encode())}
    )
    stream = client.api.build(
        **source,
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
            detail = build_log.clip(
                str(chunk.get("errorDetail", {}).get("message", chunk["error"]))
            )
            raise SglxError(
                f"docker build of {tag} failed: {detail}\n    " + "\n    ".join(tail.last(15)),
                hint=build_log.failure_hint(
                    [*tail.last(40), detail], "the lines above come from the step that failed"
                ),
                code="build_failed",
            )
        if "aux" in chunk and "ID" in chunk["aux"]:
            image_id = chunk["aux"]["ID"]
        for line in chunk.get("stream", "").splitlines():
            line = line.rstrip()
            if not line:
                continue
            tail.add(line)
            if line.startswith("Step ") or line.startswith(" ---> Using cache"):
                progress(line.strip())
    if not image_id:
        image_id = client.images.get(tag).id
    return str(image_id)


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
