"""Metrics on by default (issue 41): the profile turns sglang's --enable-metrics on through the
platform hook on sglang's real ServerArgs, SGLX_METRICS turns it off on a host, and sglx-serve
gives the server a fresh multiprocess folder holding sglx's own series, which sglang's /metrics
route (prometheus_client's multiprocess collector over that folder) serves beside its own. The
served /metrics of a real server is checked in the e2e."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.platforms import apply
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families
from test_plugin_serve_env import serve

from sglx_core.errors import SglxError
from sglx_core.observability import (
    DEPLOYMENT_ENV,
    deployment_env,
    deployment_labels,
    metrics_on,
)
from sglx_core.profile import known_arches, load_profile

# What sglang's add_prometheus_middleware serves at /metrics (srt/utils/common.py, 0.5.23).
COLLECT = (
    "from prometheus_client import CollectorRegistry, generate_latest, multiprocess\n"
    "registry = CollectorRegistry()\n"
    "multiprocess.MultiProcessCollector(registry)\n"
    "print(generate_latest(registry).decode())\n"
)
IMAGE = "sha256:" + "ab" * 32


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from sglx.demo_model import make_demo_model

    return make_demo_model(tmp_path_factory.mktemp("model") / "demo")


@pytest.mark.parametrize(
    ("environ", "expected"),
    [({}, True), ({"SGLX_METRICS": "false"}, False), ({"SGLX_METRICS": "YES"}, True)],
)
def test_the_server_runs_with_metrics_unless_the_host_says_otherwise(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    model: Path,
    environ: dict[str, str],
    expected: bool,
) -> None:
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert apply("cpu", [], tmp_path, monkeypatch, model).enable_metrics is expected
    # a user's own --enable-metrics is theirs
    assert apply("cpu", ["--enable-metrics"], tmp_path, monkeypatch, model).enable_metrics


def test_every_profile_turns_metrics_on_and_an_unreadable_switch_is_refused() -> None:
    for arch in known_arches():
        assert metrics_on(load_profile(arch), {}), arch
    with pytest.raises(SglxError, match="SGLX_METRICS='maybe' is neither on nor off") as error:
        metrics_on(load_profile("cpu"), {"SGLX_METRICS": "maybe"})
    assert "unset it" in error.value.hint


def served_metrics(folder: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """What sglang's /metrics would serve from `folder`: name -> [(labels, value)]."""
    text = subprocess.run(
        [sys.executable, "-c", COLLECT],
        env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": folder},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return {
        family.name: [(dict(s.labels), s.value) for s in family.samples]
        for family in text_string_to_metric_families(text)
    }


def test_sglx_serve_gives_the_server_a_metrics_folder_with_sglx_series(
    tmp_path: Path, model: Path
) -> None:
    """A fresh folder per start, removed when sglx-serve exits; one the operator names is kept
    (here, to read what the server's /metrics would have served)."""
    started = time.time()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    proc, probe = serve("cpu", tmp_path, model, {"TMPDIR": str(scratch)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    fresh = Path(probe["environ"]["PROMETHEUS_MULTIPROC_DIR"])
    assert fresh.parent == scratch and fresh.name.startswith("sglx-metrics-")
    assert not fresh.exists()  # removed at exit
    kept = tmp_path / "metrics"
    (tmp_path / "again").mkdir()
    # What runs, as the door that started it names it (sglx.run_spec.tail_words, the unit's env
    # file): the image id, and a bundle digest that is not one, which the label leaves out.
    deployment = {"SGLX_IMAGE_ID": IMAGE, "SGLX_BUNDLE_DIGEST": f"{IMAGE}\nx"}
    environ = {"PROMETHEUS_MULTIPROC_DIR": str(kept), **deployment}
    proc, probe = serve("cpu", tmp_path / "again", model, environ)
    assert proc.returncode == 0 and probe["environ"]["PROMETHEUS_MULTIPROC_DIR"] == str(kept)
    served = served_metrics(str(kept))
    ((labels, value),) = served["sglx_info"]
    assert (
        labels
        == {
            "arch": "cpu",
            "version": labels["version"],
            "serving_profile": probe["environ"].get("SGLX_SERVING_PROFILE", "none"),
            "model": "demo",
            "image_id": IMAGE,
            "bundle_digest": "",
        }
        and value == 1.0
    )
    ((_, when),) = served["sglx_server_start_time_seconds"]
    assert started <= when <= time.time()
    entries = {
        labels["state"]: value for labels, value in served["sglx_prebuilt_triton_cache_entries"]
    }
    assert entries == {"copied": 0.0, "present": 0.0}  # the cpu image carries none


def test_a_host_with_metrics_off_gets_no_folder_and_an_unreadable_switch_starts_nothing(
    tmp_path: Path, model: Path
) -> None:
    for name in ("off", "odd"):
        (tmp_path / name).mkdir()
    proc, probe = serve("cpu", tmp_path / "off", model, {"SGLX_METRICS": "0"})
    assert proc.returncode == 0 and "PROMETHEUS_MULTIPROC_DIR" not in probe["environ"]
    # the probe never ran: serve() names what sglx-serve said instead
    refusal = "refused before starting the server: SGLX_METRICS='maybe' is neither on nor off"
    with pytest.raises(AssertionError, match=refusal):
        serve("cpu", tmp_path / "odd", model, {"SGLX_METRICS": "maybe"})


def test_the_deployment_is_named_only_where_known() -> None:
    """A door names what it knows (an image started by hand names neither)."""
    bundle = "sha256:" + "cd" * 32
    assert deployment_env(IMAGE, bundle) == {
        "SGLX_IMAGE_ID": IMAGE,
        "SGLX_BUNDLE_DIGEST": bundle,
    }
    assert deployment_env(IMAGE, None) == {"SGLX_IMAGE_ID": IMAGE}
    assert deployment_env(None, None) == {}
    assert deployment_labels({}) == {"image_id": "", "bundle_digest": ""}


@given(st.dictionaries(st.sampled_from(sorted(DEPLOYMENT_ENV.values())), st.text(max_size=90)))
def test_a_deployment_label_is_a_digest_or_empty(environ: dict[str, str]) -> None:
    """Whatever the server's environment holds, a label is one bounded value: a digest or ""."""
    for label, value in deployment_labels(environ).items():
        assert value == "" or (value == environ[DEPLOYMENT_ENV[label]] and len(value) == 71), (
            label,
            value,
        )
