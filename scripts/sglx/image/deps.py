"""The image the serving image builds on: the base with the frozen wheels installed in a venv.

The classic builder has no bind mounts, so a Dockerfile stage would have to COPY the wheelhouse
in (a layer of its own, 3 GB for cpu) and the serving stage then COPY the venv out of it (8 GB
written and hashed again). Instead, `images/<arch>/deps.sh` runs in a container of the base
with no network: the wheelhouse, the lock and the script are copied into it as one tar stream,
the script installs the venv and removes them, and the container is committed as one layer
that holds the venv alone. The serving image is built FROM it.

The image is tagged `sglx/deps:<arch>-<key>`, the key a digest of the base image's id, the
lock's digest and the script's text (and base_probe.py, which it runs): a build with the same
three reuses it and installs nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sglx.image import build_log
from sglx.image.payload import Payload, normalise
from sglx.progress import Progress
from sglx.wheels.lockfile import Lock
from sglx_core import base_probe
from sglx_core.errors import SglxError

DEPS_REPO = "sglx/deps"
# Where the wheelhouse, the lock and the scripts are copied in the container (deps.sh's $deps).
DEPS_DIR = "/tmp/sglx-deps"
KEY_FORMAT = 1
CHUNK = 1 << 20


def deps_tag(arch: str, key: str) -> str:
    return f"{DEPS_REPO}:{arch}-{key[:16]}"


def deps_key(base_id: str, lock_digest: str, script: str) -> str:
    """What the venv is made of: the base, the locked wheels, and how they are installed."""
    document = {
        "format": KEY_FORMAT,
        "base": base_id,
        "lock": lock_digest,
        "script": script,
        "base_probe": Path(base_probe.__file__).read_text(),
    }
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()


def deps_image(
    client: Any,
    *,
    arch: str,
    base_ref: str,
    base_image: Any,
    lock: Lock,
    lock_file: Path,
    wheelhouse: Path,
    script: str,
    timeout_s: int,
    progress: Progress,
    reuse: bool,
) -> Payload:
    """The deps image of `base_image` and `lock`: reused when one with the same key exists (and
    `reuse`), else made by running `script` in a container of the base."""
    from docker.errors import ImageNotFound

    tag = deps_tag(arch, deps_key(base_image.id, lock.digest, script))
    try:
        earlier = client.images.get(tag).id
    except ImageNotFound:
        earlier = None
    if earlier is not None and reuse:
        progress(f"venv: reusing {tag}")
        return Payload(tag, imported=False)
    members = [(wheelhouse / w.filename, f"wheelhouse/{w.filename}") for w in lock.wheels]
    members.append((lock_file, "wheelhouse/lock.txt"))
    members.append((Path(base_probe.__file__), "base_probe.py"))
    size = sum(source.stat().st_size for source, _ in members)
    progress(
        f"venv: installing {len(lock.wheels)} locked wheels ({size / 1e9:.2f} GB) into a "
        f"container of {base_ref} (no network), committed as {tag}"
    )
    from docker.errors import DockerException
    from requests.exceptions import RequestException

    try:
        _install_and_commit(client, base_image, tag, script, members, timeout_s, progress)
    except (DockerException, RequestException) as exc:
        detail = getattr(exc, "explanation", None) or str(exc)
        raise SglxError(
            f"the engine failed making {tag}: {str(detail)[:2000]}",
            hint="check the engine (docker info, free disk with docker system df); rerun with "
            "-v for details",
            code="build_failed",
        ) from None
    if earlier is not None:  # --no-cache: the tag moved; the image it left is of no use
        _remove_quietly(client, earlier)
    return Payload(tag, imported=True)


def _install_and_commit(
    client: Any,
    base_image: Any,
    tag: str,
    script: str,
    members: list[tuple[Path, str]],
    timeout_s: int,
    progress: Progress,
) -> None:
    api = client.api
    config = base_image.attrs.get("Config") or {}
    # The commit keeps the container's entrypoint and command where the change names none, so
    # the script is run through the base's own (absent) entrypoint where it has none, and the
    # base's entrypoint and command are named again in the commit.
    entrypoint, cmd = config.get("Entrypoint"), config.get("Cmd")
    script_path = f"{DEPS_DIR}/deps.sh"
    restore = [f"CMD {json.dumps(cmd or ['/bin/sh'])}"]
    if entrypoint:
        restore = [f"ENTRYPOINT {json.dumps(entrypoint)}", f"CMD {json.dumps(cmd or [])}"]
    container = api.create_container(
        base_image.id,
        command=[script_path] if entrypoint else ["/bin/sh", script_path],
        entrypoint=["/bin/sh"] if entrypoint else None,
        user="root",
        working_dir="/",
        network_disabled=True,
        host_config=api.create_host_config(network_mode="none"),
    )["Id"]
    try:
        _copy_in(api, container, script, members)
        api.start(container)
        tail = build_log.Tail()
        for line in build_log.lines(api.logs(container, stream=True, follow=True)):
            tail.add(line)
            if line.startswith("deps: "):
                progress("venv: " + line.removeprefix("deps: "))
        status = int(api.wait(container, timeout=timeout_s).get("StatusCode", -1))
        if status != 0:
            raise SglxError(
                f"installing the locked wheels into {base_image.id} failed (deps.sh exit "
                f"{status}):\n    " + "\n    ".join(tail.last(15)),
                hint=build_log.failure_hint(
                    tail.last(40), "the lines above are the end of deps.sh's output"
                ),
                code="build_failed",
            )
        progress(f"venv: committing the container as {tag} (one layer: the venv)")
        repository, _, version = tag.partition(":")
        api.commit(
            container,
            repository=repository,
            tag=version,
            message=f"sglx: the venv of the locked wheels, installed by deps.sh ({tag})",
            changes=[
                *restore,
                f"USER {config.get('User') or 'root'}",
                f"WORKDIR {config.get('WorkingDir') or '/'}",
            ],
        )
    finally:
        api.remove_container(container, force=True)


def _copy_in(api: Any, container: str, script: str, members: list[tuple[Path, str]]) -> None:
    """`members` and the script into DEPS_DIR of the container, as one tar streamed from a
    thread (no temporary copy of the wheelhouse on the client's disk)."""
    read_end, write_end = os.pipe()
    failed: list[BaseException] = []

    def write() -> None:
        try:
            with (
                os.fdopen(write_end, "wb") as pipe,
                tarfile.open(fileobj=pipe, mode="w|") as tar,
            ):
                top = tarfile.TarInfo(DEPS_DIR.removeprefix("/tmp/"))
                top.type, top.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(top)
                data = script.encode()
                entry = tarfile.TarInfo(f"{top.name}/deps.sh")
                entry.size, entry.mode = len(data), 0o755
                tar.addfile(entry, io.BytesIO(data))
                for folder in sorted({str(Path(name).parent) for _, name in members} - {"."}):
                    info = tarfile.TarInfo(f"{top.name}/{folder}")
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
                for source, name in members:
                    tar.add(source, arcname=f"{top.name}/{name}", recursive=False, filter=normalise)
        except BaseException as exc:  # the reader sees a cut stream; the error says why
            failed.append(exc)

    writer = threading.Thread(target=write, name="sglx-deps-tar", daemon=True)
    writer.start()
    pipe = os.fdopen(read_end, "rb")
    try:
        api.put_archive(container, "/tmp", _chunks(pipe))
    finally:
        pipe.close()  # a writer still writing (the engine stopped reading) gets a broken pipe
        writer.join()
    if failed:
        raise SglxError(
            f"could not send the wheelhouse to the build container: {failed[0]}",
            hint="check the wheelhouse with `sglx wheels verify` and fetch it again",
            code="build_failed",
        )


def _chunks(pipe: Any) -> Iterator[bytes]:
    while chunk := pipe.read(CHUNK):
        yield chunk


def _remove_quietly(client: Any, image_id: str) -> None:
    from docker.errors import APIError

    # A container or a child image may still use it: `sglx image prune` then reports it.
    with contextlib.suppress(APIError):
        client.images.remove(image_id)
