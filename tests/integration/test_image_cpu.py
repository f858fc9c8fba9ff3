"""`sglx image build` on the cpu reference: a real image serves like transformers.

One cold build (demo model, base debootstrapped by the session), one container answering
/health, /v1/models and a greedy completion, and one rebuild after touching only plugin code.
"""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.engine_fixtures import build, free_port, remove_images
from helpers.server import http, transformers_greedy, wait_healthy

from sglx.wheels.steps import load_lock
from sglx_core.profile import load_profile

pytestmark = [pytest.mark.docker, pytest.mark.slow]
PLUGIN_FILE = Path(__file__).resolve().parents[2] / "plugin" / "sglx_platform" / "failures.py"


def test_image_is_labelled_with_what_it_carries(docker: Any, cpu_image: dict) -> None:
    labels = docker.images.get(cpu_image["tag"]).labels
    assert labels["io.sglx.arch"] == "cpu"
    assert labels["io.sglx.model.demo"] == "true"
    assert labels["io.sglx.model.name"] == "demo"
    assert labels["io.sglx.lock.digest"] == load_lock(load_profile("cpu")).digest
    assert labels["io.sglx.weights.digest"].startswith("sha256:")
    assert labels["io.sglx.sglang.version"] == "0.5.23"
    assert len(labels["org.opencontainers.image.revision"]) >= 40
    assert labels["org.opencontainers.image.base.digest"].startswith("sha256:")
    config = docker.images.get(cpu_image["tag"]).attrs["Config"]
    assert config["User"] == "sglx"
    assert "HF_HUB_OFFLINE=1" in config["Env"]
    assert config["Healthcheck"]["Test"][-1].endswith("sglx-healthcheck")


def test_image_scan_is_clean(cpu_bundle_scan: dict[str, Any]) -> None:
    """Every ELF dependency resolves, or the cpu profile's scan rules accept it with a reason.

    Read from the run's one scan of the session's cpu bundle (`sglx scan --bundle`: the archive
    of a copy of this image, layer for layer); scanning 6.4 GB a second time would only repeat
    it."""
    envelope = cpu_bundle_scan
    assert (envelope["exit_code"], envelope["findings"]) == (0, [])
    [scan] = envelope["data"]["scans"]
    assert scan["dependencies"]["resolved"] > 0
    assert all(item["reason"] for item in scan["accepted"])


@pytest.fixture(scope="module")
def served(
    docker: Any, cpu_image: dict, run_id: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path, Any]]:
    port = free_port()
    container = docker.containers.run(
        cpu_image["tag"],
        ["--port", str(port)],
        detach=True,
        network_mode="host",
        name=f"sglx-test-cpu-{run_id}",
    )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_healthy(
            base, timeout=600, alive=lambda: docker.containers.get(container.id).status == "running"
        )
        # The baked weights, copied out to compare with transformers on the same bytes.
        model = tmp_path_factory.mktemp("baked")
        stream, _ = container.get_archive("/models/model")
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            tar.extractall(model, filter="data")
        yield base, model / "model", container
    except BaseException:
        print(container.logs().decode()[-5000:])
        raise
    finally:
        container.remove(force=True)


def test_container_answers_health_and_models(served: tuple[str, Path, Any]) -> None:
    base, _, _ = served
    assert http(f"{base}/health")[0] == 200
    status, listing = http(f"{base}/v1/models")
    assert status == 200
    assert [m["id"] for m in listing["data"]] == ["demo"]


def test_greedy_completion_matches_transformers_on_the_baked_weights(
    served: tuple[str, Path, Any],
) -> None:
    from transformers import AutoTokenizer

    base, model, _ = served
    tokenizer = AutoTokenizer.from_pretrained(model)
    prompts = ["Hello, world!", "Pack my box with"]
    for prompt, want in zip(prompts, transformers_greedy(model, prompts, 12), strict=True):
        status, body = http(
            f"{base}/v1/completions",
            {"model": "demo", "prompt": prompt, "max_tokens": 12, "temperature": 0},
        )
        assert status == 200, body
        assert body["choices"][0]["text"] == tokenizer.decode(want, skip_special_tokens=True)


def test_the_server_started_without_serving_flags_chose_the_cpu_profile(
    served: tuple[str, Path, Any],
) -> None:
    """sglx-serve read this machine's cores and memory and the demo model's config.json, chose
    the cpu arch's serving profile, said why, and handed its name to the server."""
    _, _, container = served
    logs = container.logs().decode()
    assert "sglx-serve: serving profile cpu-host (general): matches 1x cpu" in logs, logs[-3000:]
    assert ": fits." in logs  # the capacity check's numbers, before the server started
    code, state = container.exec_run(["cat", "/tmp/sglx-serve.json"])
    assert code == 0, state
    assert json.loads(state)["serving_profile"] == "cpu-host"


def test_dry_run_prints_the_command_and_where_each_value_came_from(
    docker: Any, cpu_image: dict
) -> None:
    """`docker run IMAGE --dry-run`: nothing starts; the final launch_server command, the
    environment the serving profile adds, and the layer that set each value."""
    tag = cpu_image["tag"]
    argv = ["--dry-run", "--json", "--context-length", "256"]
    document = json.loads(docker.containers.run(tag, argv, remove=True, network_mode="none"))
    assert document["selected"] == "cpu-host"
    assert document["command"][1:3] == ["-m", "sglang.launch_server"]
    assert document["command"][-2:] == ["--context-length", "256"]
    assert document["env"] == {"SGLX_SERVING_PROFILE": "cpu-host"}
    layers = {item["name"]: (item["value"], item["layer"]) for item in document["settings"]}
    assert layers["--context-length"] == ("256", "user argument")
    assert layers["--device"] == ("cpu", "arch default")
    assert document["capacity"]["fits"] is True
    text = docker.containers.run(tag, ["--dry-run"], remove=True, network_mode="none").decode()
    assert "--device cpu <- arch default" in text
    assert "sglang.launch_server --model-path /models/model" in text


def test_a_context_that_cannot_fit_is_refused_before_any_weight_loads(
    docker: Any, cpu_image: dict
) -> None:
    """Two billion tokens of KV cache (about 477 GiB for the demo model) fit on no machine
    this runs on: sglx-serve refuses with the numbers and the fixes, exit 2, and the server
    never starts."""
    container = docker.containers.run(
        cpu_image["tag"], ["--context-length", "2000000000"], detach=True, network_mode="none"
    )
    try:
        code = container.wait(timeout=120)["StatusCode"]
        logs = container.logs().decode()
    finally:
        container.remove(force=True)
    assert code == 2, logs[-3000:]
    assert "refused before starting the server: the model does not fit" in logs
    assert "2,000,000,000 tokens of context x 1 request" in logs
    assert "Use --context-length" in logs
    assert "sglang.launch_server" not in logs and "Traceback" not in logs


def test_rebuild_after_a_plugin_change_reuses_every_heavy_layer(
    docker: Any, cpu_image: dict, cpu_base: str, cpu_wheelhouse: Path, run_id: str
) -> None:
    original = PLUGIN_FILE.read_text()
    tag = f"sglx-test/cpu-rebuilt:{run_id}"
    try:
        PLUGIN_FILE.write_text(original + "\n# a plugin-only change made by the rebuild test\n")
        build(
            "--arch", "cpu", "--base", cpu_base, "--wheelhouse", str(cpu_wheelhouse), "--tag", tag
        )
    finally:
        PLUGIN_FILE.write_text(original)
    try:
        first = docker.images.get(cpu_image["tag"]).attrs["RootFS"]["Layers"]
        second = docker.images.get(tag).attrs["RootFS"]["Layers"]
        shared = next(
            (i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b),
            min(len(first), len(second)),
        )
        # base, runtime user, venv (GBs), weights and profile are the same layers; only sglx's
        # own wheels and their install step were rebuilt.
        assert shared == len(first) - 2
        assert len(second) == len(first)
    finally:
        remove_images(docker, tag)
