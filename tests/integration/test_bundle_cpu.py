"""The acceptance round trip with the real cpu image: create (with the image scan), verify
(hashes and the scan re-run on the archive), remove the image from the engine, install,
`docker run` it and get one completion, then install again and find nothing redone.

The bundled image is the session's cpu image with one extra label, so it shares every layer:
removing it (without pruning parents) leaves the session image and its build cache alone,
while `docker save` still streams the full 6.4 GB archive and `docker load` reads all of it.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path
from typing import Any

from conftest import free_port
from helpers.server import http, wait_healthy

from sglx.cli import main


def cli_json(*argv: str) -> tuple[int, dict[str, Any]]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([*argv, "--json", "-q"])
    return code, json.loads(out.getvalue())


def labelled_copy(docker: Any, source: str, tag: str) -> str:
    """`source` plus one label: a new image id over the same layers."""
    context = io.BytesIO(f"FROM {source}\nLABEL io.sglx.test.bundle={tag}\n".encode())
    image, _ = docker.images.build(fileobj=context, tag=tag, network_mode="none", rm=True)
    return str(image.id)


def round_trip(docker: Any, source: str, workdir: Path, run_id: str) -> None:
    from docker.errors import ImageNotFound

    tag = f"sglx-test/bundle-cpu:{run_id}"
    image_id = labelled_copy(docker, source, tag)
    bundle = workdir / "bundle"
    state = workdir / "state"
    container = None
    try:
        code, created = cli_json(
            "bundle", "create", "--arch", "cpu", "--image", tag, "--out", str(bundle),
            "--chunk-size", "1GiB",
        )  # fmt: skip
        assert code == 0, created
        assert created["data"]["scan"] == "ok"
        assert len(created["data"]["image"]["chunks"]) >= 6
        code, verified = cli_json("bundle", "verify", str(bundle))
        assert (code, verified["findings"]) == (0, []), verified
        assert verified["data"]["scan"] == "ok"

        docker.images.remove(tag, noprune=True)
        assert image_id not in {image.id for image in docker.images.list(all=True)}

        code, first = cli_json("bundle", "install", str(bundle), "--state", str(state))
        assert code == 0, first
        assert first["data"]["redone"] == ["verify", "image"]
        assert docker.images.get(tag).id == image_id

        port = free_port()
        container = docker.containers.run(
            tag, ["--port", str(port)], detach=True, network_mode="host",
            name=f"sglx-test-bundle-cpu-{run_id}", shm_size="1g",
        )  # fmt: skip
        base = f"http://127.0.0.1:{port}"
        wait_healthy(
            base, timeout=600, alive=lambda: docker.containers.get(container.id).status == "running"
        )
        status, body = http(
            f"{base}/v1/completions",
            {"model": "demo", "prompt": "Hello", "max_tokens": 8, "temperature": 0},
        )
        assert status == 200, body
        assert body["choices"][0]["text"]

        code, second = cli_json("bundle", "install", str(bundle), "--state", str(state))
        assert code == 0, second
        assert second["data"]["redone"] == []
        assert second["data"]["steps"]["verify"]["detail"].startswith("0 files hashed")
    finally:
        if container is not None:
            with contextlib.suppress(Exception):
                print(container.logs().decode()[-3000:])
            container.remove(force=True)
        with contextlib.suppress(ImageNotFound):
            docker.images.remove(tag, noprune=True)
        shutil.rmtree(bundle, ignore_errors=True)


def test_cpu_round_trip(
    docker: Any, cpu_image: dict[str, Any], run_id: str, tmp_path: Path
) -> None:
    round_trip(docker, cpu_image["tag"], tmp_path, run_id)
