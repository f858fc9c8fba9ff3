"""The acceptance round trip with the real cpu image: create, verify (hashes; the image scan
of the same archive is the run's one `sglx scan --bundle`, which test_image_cpu reads), remove
the image from the engine, install, `docker run` it and get one completion, then install again
and find nothing redone.

The bundle is the session's (conftest.cpu_bundle): a labelled copy of the session's cpu image,
so it shares every layer: removing it (without pruning parents) leaves the session image and
its build cache alone, while `docker save` streamed the full 6.4 GB archive and `docker load`
reads all of it. The e2e test rolls the same bundle out to its test hosts, so the two share
one xdist unit (helpers/worker_schedule.py): the image cannot leave the engine while the test
hosts serve it.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

from helpers.engine_fixtures import REPO, free_port
from helpers.server import http, wait_healthy
from jsonschema import Draft202012Validator

from sglx.cli import main
from sglx.engine import image_ids


def cli_json(*argv: str) -> tuple[int, dict[str, Any]]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([*argv, "--json", "-q"])
    return code, json.loads(out.getvalue())


def round_trip(docker: Any, cpu_bundle: dict[str, Any], workdir: Path, run_id: str) -> None:
    tag, image_id, bundle = cpu_bundle["tag"], cpu_bundle["image_id"], cpu_bundle["path"]
    state = workdir / "state"
    container = None
    try:
        created = cpu_bundle["created"]
        assert created["scan"] is None  # made with --no-scan (engine_fixtures.make_cpu_bundle)
        assert len(created["image"]["chunks"]) >= 6
        code, verified = cli_json("bundle", "verify", str(bundle), "--no-scan")
        assert (code, verified["findings"]) == (0, []), verified
        # and the JSON Schema a site's own tools check the manifest with agrees
        schema = json.loads((REPO / "bundles" / "bundle.schema.json").read_text())
        manifest = json.loads((Path(bundle) / "bundle.json").read_text())
        assert [e.message for e in Draft202012Validator(schema).iter_errors(manifest)] == []

        docker.images.remove(tag, noprune=True)
        assert image_id not in image_ids(docker)

        code, first = cli_json("bundle", "install", "--no-scan", str(bundle), "--state", str(state))
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

        code, second = cli_json(
            "bundle", "install", "--no-scan", str(bundle), "--state", str(state)
        )
        assert code == 0, second
        assert second["data"]["redone"] == []
        assert second["data"]["steps"]["verify"]["detail"].startswith("0 files hashed")
    finally:
        if container is not None:
            with contextlib.suppress(Exception):
                print(container.logs().decode()[-3000:])
            container.remove(force=True)


def test_cpu_round_trip(
    docker: Any, cpu_bundle: dict[str, Any], run_id: str, tmp_path: Path
) -> None:
    round_trip(docker, cpu_bundle, tmp_path, run_id)
