"""`sglx-serve --list-profiles`, `--dry-run` and the start-time selection, run in-process over
fixture hosts (real sysfs layouts, helpers.serving_fixtures) and real config.json contents
(helpers.model_configs; config.json only, so the weight bytes are estimated).

What the image entrypoint answers: documents that validate against the JSON Schemas of
docs/reference/serving.md, the command with each value's layer, refusals (exit 2, the numbers and
the fixes, never a traceback) before anything starts, and the profile name the ranks of a serving
group compare. Built and tested on fixtures, not run on hardware.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from helpers import model_configs, serving_fixtures
from helpers.profiles import bake

from sglx_core.profile import load_profile
from sglx_platform.consistency import differences, fingerprint
from sglx_runtime import serve, serving

REPO = Path(__file__).resolve().parents[3]
DOC = REPO / "docs" / "reference" / "serving.md"

# name -> (arch, fixture writer, the profile it selects for Llama-3.1-8B)
HOSTS: dict[str, tuple[str, Callable[[Path], Path], str]] = {
    "8x MI300X": ("gfx942", serving_fixtures.mi300x_host, "mi300x-tp8"),
    "4x MI325X": ("gfx942", serving_fixtures.mi325x_host, "mi325x-tp4"),
    "8x MI355X": ("gfx950", serving_fixtures.mi355x_host, "mi355x-tp8"),
    "gfx1151": ("gfx1151", serving_fixtures.strix_halo_host, "gfx1151-apu"),
    "8x P800": ("kunlun", serving_fixtures.p800_host, "p800-tp8"),
    "cpu": ("cpu", serving_fixtures.cpu_host, "cpu-host"),
}

Run = Callable[..., tuple[int, str, str]]


def schema(heading: str) -> dict[str, Any]:
    """The ```json block under the `heading` section of docs/reference/serving.md."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split(f"## `{heading}`", 1)[1]
    found = re.search(r"```json\n(.*?)\n```", section, re.DOTALL)
    assert found, f"no json block under {heading}"
    document: dict[str, Any] = json.loads(found.group(1))
    jsonschema.Draft202012Validator.check_schema(document)
    return document


LIST_SCHEMA = schema("sglx-serve --list-profiles --json")
DRY_RUN_SCHEMA = schema("sglx-serve --dry-run --json")


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    made = {name: make(tmp_path_factory.mktemp("host")) for name, (_, make, _) in HOSTS.items()}
    made["empty"] = tmp_path_factory.mktemp("empty")
    made["8x MI325X"] = serving_fixtures.mi325x_host(tmp_path_factory.mktemp("host"), 8)
    return made


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("models")
    return {name: model_configs.write_model(base / name, name) for name in model_configs.MODELS}


@pytest.fixture
def run(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    roots: dict[str, Path],
    models: dict[str, Path],
) -> Run:
    """serve.main(args) as `docker run IMAGE args` would call it on `host` with `model` baked:
    (exit code, stdout, stderr)."""

    def call(
        host: str,
        model: str | Path,
        *args: str,
        env: dict[str, str] | None = None,
        profile: Path | None = None,
    ) -> tuple[int, str, str]:
        arch = HOSTS[host][0] if host in HOSTS else host.split(":")[0]
        root = roots[host if host in roots else host.split(":")[1]]
        for name in ("SGLX_SERVING_PROFILE", "SGLX_SERVING_METRIC", "SGLX_SERVING_PRECISION",
                     "SGLX_PREFLIGHT", "SGLX_SKIP_PREFLIGHT"):  # fmt: skip
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("SGLX_PROFILE", str(profile or REPO / "images" / arch / "arch.yaml"))
        monkeypatch.setenv("SGLX_MODEL", str(models[model] if isinstance(model, str) else model))
        monkeypatch.setenv("SGLX_PROBE_ROOT", str(root))
        for name, value in (env or {}).items():
            monkeypatch.setenv(name, value)
        capsys.readouterr()
        code = serve.main(list(args))
        out, err = capsys.readouterr()
        assert "Traceback" not in out + err
        return code, out, err

    return call


# --- the documents and their schemas -----------------------------------------------------------


@pytest.mark.parametrize("host", list(HOSTS))
def test_documents_validate_against_the_documented_schemas(run: Run, host: str) -> None:
    code, out, _ = run(host, "llama-3.1-8b", "--list-profiles", "--json")
    assert code == 0
    listed = json.loads(out)
    jsonschema.validate(listed, LIST_SCHEMA)
    assert listed["selected"] == HOSTS[host][2]
    assert listed["skipped"] is None
    assert listed["model"]["weight_bytes_source"] == "estimated from config.json"
    statuses = [p["status"] for p in listed["profiles"]]
    assert statuses[0] == "runnable"
    assert all(p["reason"] for p in listed["profiles"])

    code, out, _ = run(host, "llama-3.1-8b", "--dry-run", "--json")
    assert code == 0
    document = json.loads(out)
    jsonschema.validate(document, DRY_RUN_SCHEMA)
    assert document["selected"] == HOSTS[host][2]
    assert document["env"]["SGLX_SERVING_PROFILE"] == HOSTS[host][2]
    assert document["capacity"]["fits"] is True


def test_skipped_documents_validate_too(run: Run) -> None:
    """No device (hardware null) and SGLX_SERVING_PROFILE=off (nothing read) are documents too."""
    for env in ({}, {"SGLX_SERVING_PROFILE": "off"}):
        code, out, _ = run("gfx942:empty", "llama-3.1-8b", "--list-profiles", "--json", env=env)
        assert code == 0
        listed = json.loads(out)
        jsonschema.validate(listed, LIST_SCHEMA)
        assert listed["hardware"] is None and listed["selected"] is None
        assert listed["skipped"]
        code, out, _ = run("gfx942:empty", "llama-3.1-8b", "--dry-run", "--json", env=env)
        assert code == 0
        jsonschema.validate(json.loads(out), DRY_RUN_SCHEMA)


# --- the command and the layer of each value ---------------------------------------------------


def test_dry_run_puts_the_profile_first_and_records_the_users_override(run: Run) -> None:
    code, out, _ = run("8x MI300X", "llama-3.1-70b", "--dry-run", "--json", "--tp", "4")
    assert code == 0
    document = json.loads(out)
    command = document["command"]
    assert command[1:3] == ["-m", "sglang.launch_server"]
    tail = command[command.index("--port") + 2 :]
    assert tail == ["--tp", "8", "--mem-fraction-static", "0.8", "--tp", "4"]
    settings = {s["name"]: s for s in document["settings"]}
    assert settings["--tp"] == {
        "name": "--tp",
        "value": "4",
        "layer": "user argument",
        "overrides": "8",
    }
    assert settings["--mem-fraction-static"]["layer"] == "serving profile"
    assert document["env"] == {"SGLX_SERVING_PROFILE": "mi300x-tp8"}
    assert document["capacity"]["tp"] == 4  # the check ran on the final flags

    code, out, _ = run("8x MI300X", "llama-3.1-70b", "--dry-run", "--tp", "4")
    assert code == 0
    assert "--tp 4 (user argument) overrides the serving profile's 8" in out
    assert "--tp 8 --mem-fraction-static 0.8 --tp 4" in out
    assert "SGLX_SERVING_PROFILE=mi300x-tp8" in out


def test_docker_run_e_wins_over_the_profile_env(run: Run, tmp_path: Path) -> None:
    """A profile variable the operator set with `docker run -e` stays the operator's, and is
    listed with the profile value it kept out; the others join the server's environment."""
    document = load_profile("gfx942").to_json()
    chosen = document["serving"]["profiles"]["mi300x-tp8"]
    chosen["env"] = {"SGLANG_USE_AITER": "1", "HSA_NO_SCRATCH_RECLAIM": "1"}
    chosen["sources"] |= dict.fromkeys(chosen["env"], "a test value")
    profile = bake("gfx942", tmp_path / "arch.yaml", serving=document["serving"])

    code, out, _ = run(
        "8x MI300X",
        "llama-3.1-8b",
        "--dry-run",
        "--json",
        env={"SGLANG_USE_AITER": "0"},
        profile=profile,
    )
    assert code == 0
    result = json.loads(out)
    assert result["env"] == {
        "HSA_NO_SCRATCH_RECLAIM": "1",
        "SGLX_SERVING_PROFILE": "mi300x-tp8",
    }
    settings = {s["name"]: s for s in result["settings"]}
    assert settings["SGLANG_USE_AITER"] == {
        "name": "SGLANG_USE_AITER",
        "value": "0",
        "layer": "docker run -e",
        "overrides": "1",
    }
    assert settings["HSA_NO_SCRATCH_RECLAIM"]["layer"] == "serving profile"


# --- refusals ---------------------------------------------------------------------------------


def test_a_context_that_cannot_fit_is_refused_with_the_numbers_and_the_fixes(run: Run) -> None:
    args = ("--tp", "1", "--context-length", "1000000")
    code, out, _ = run("8x MI300X", "llama-3.1-70b", "--dry-run", "--json", *args)
    assert code == 2
    error = json.loads(out)["error"]
    assert error["code"] == "does_not_fit"
    assert "1,000,000 tokens of context" in error["message"]
    assert "131.4 GiB of weights" in error["message"]
    assert "does not fit" in error["message"]
    assert "Use --tp 4 (this host has 8 devices)" in error["hint"]
    assert "FP8-quantized checkpoint" in error["hint"]

    code, out, _ = run("8x MI300X", "llama-3.1-70b", "--dry-run", *args)
    assert code == 2
    assert out.startswith("refused: the model does not fit with serving profile mi300x-tp8")
    assert "hint: change one of these" in out


def hostile_configs() -> dict[str, tuple[str, str]]:
    """name -> (config.json text, what the refusal must name)."""
    deep = '{"a": ' * 5000 + "1" + "}" * 5000
    return {
        "missing key": (
            json.dumps(model_configs.config("llama-3.1-8b", num_hidden_layers=None)),
            "config.json: num_hidden_layers is missing",
        ),
        "zero heads": (
            json.dumps(model_configs.config("llama-3.1-8b", num_key_value_heads=0)),
            "config.json: num_key_value_heads is 0",
        ),
        "deep nesting": (deep, "config.json: the model config is nested more than 64 levels"),
        "not an object": ("[1, 2, 3]", "config.json: the model config is a JSON list, not an"),
    }


@pytest.mark.parametrize("case", list(hostile_configs()))
def test_a_hostile_config_json_is_refused_naming_the_key(
    run: Run, tmp_path: Path, case: str
) -> None:
    text, named = hostile_configs()[case]
    (tmp_path / "config.json").write_text(text)
    for flags in (("--dry-run",), ("--list-profiles", "--json")):
        code, out, _ = run("8x MI300X", tmp_path, *flags)
        assert code == 2, out
        assert named in out, out
    error = json.loads(out)["error"]
    # too deep is refused by the bounded JSON reader (sglx_core.untrusted) before model.py sees it
    assert error["code"] == ("corrupt" if case == "deep nesting" else "model_config")
    assert error["hint"]


def test_a_malformed_sysfs_node_is_refused_naming_the_node(
    run: Run, tmp_path: Path, models: dict[str, Path]
) -> None:
    root = serving_fixtures.mi300x_host(tmp_path / "host", 2)
    node = root / serving_fixtures.KFD_NODES / "3" / "properties"
    node.write_text(node.read_text().replace("device_id 29857", "device_id 0x74a1"))
    code, out, _ = run(
        "gfx942:empty", "llama-3.1-8b", "--list-profiles", env={"SGLX_PROBE_ROOT": str(root)}
    )
    assert code == 2
    assert out.startswith("refused: ")
    assert str(node) in out
    assert "device_id 0x74a1" in out


def test_devices_this_image_does_not_serve_are_refused_before_the_server_starts(
    run: Run, tmp_path: Path
) -> None:
    """Issue 40 item 4: cards present but not identified (an unknown PCI vendor id), or another
    arch's GPUs, stop sglx-serve (exit 2) naming what it found; selection never skips them."""
    unknown = serving_fixtures.p800_host(tmp_path / "unknown", 2, pci_vendor="0x1eb7")
    code, out, _ = run(
        "kunlun:empty", "llama-3.1-8b", "--dry-run", env={"SGLX_PROBE_ROOT": str(unknown)}
    )
    assert code == 2, out
    assert "refused: 2 /dev/xpu nodes" in out and "cannot be identified" in out
    gfx950 = serving_fixtures.mi355x_host(tmp_path / "mi355x", 2)
    code, out, _ = run(
        "gfx942:empty", "llama-3.1-8b", "--dry-run", env={"SGLX_PROBE_ROOT": str(gfx950)}
    )
    assert code == 2, out
    assert "only gfx950 GPUs; this image serves gfx942" in out


def test_no_device_of_the_arch_skips_selection(run: Run) -> None:
    """A container started without its devices: nothing is chosen, preflight names what is
    missing; the dry run still shows the command (the user's flags alone)."""
    for host in ("gfx942:empty", "kunlun:empty"):
        code, out, _ = run(host, "llama-3.1-8b", "--dry-run", "--json", "--tp", "2")
        assert code == 0
        document = json.loads(out)
        assert document["selected"] is None
        assert "device visible" in document["skipped"]
        assert "preflight" in document["skipped"]
        assert document["command"][-2:] == ["--tp", "2"]
        assert document["env"] == {}


# --- SGLX_SERVING_PROFILE ----------------------------------------------------------------------


def test_a_named_profile_is_used(run: Run) -> None:
    env = {"SGLX_SERVING_PROFILE": "gfx942-one-device"}
    code, out, _ = run("8x MI300X", "llama-3.1-8b", "--dry-run", "--json", env=env)
    assert code == 0
    document = json.loads(out)
    assert document["selected"] == "gfx942-one-device"
    assert document["env"]["SGLX_SERVING_PROFILE"] == "gfx942-one-device"


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("no-such-profile", "SGLX_SERVING_PROFILE=no-such-profile names no serving profile"),
        ("mi325x-tp8", "serving profile mi325x-tp8 (SGLX_SERVING_PROFILE) cannot run here"),
    ],
)
def test_a_named_profile_that_cannot_run_is_refused(run: Run, name: str, said: str) -> None:
    env = {"SGLX_SERVING_PROFILE": name}
    code, out, _ = run("8x MI300X", "llama-3.1-8b", "--dry-run", env=env)
    assert code == 2
    assert said in out
    code, out, _ = run("8x MI300X", "llama-3.1-8b", "--dry-run", "--json", env=env)
    assert code == 2
    assert name in json.loads(out)["error"]["message"]


def test_off_starts_with_the_users_flags_alone(run: Run) -> None:
    env = {"SGLX_SERVING_PROFILE": "off"}
    code, out, _ = run("8x MI300X", "llama-3.1-8b", "--dry-run", "--json", "--tp", "2", env=env)
    assert code == 0
    document = json.loads(out)
    assert document["selected"] is None
    assert document["skipped"] == "SGLX_SERVING_PROFILE=off: the user's flags alone"
    assert document["command"][document["command"].index("--port") + 2 :] == ["--tp", "2"]
    assert document["env"] == {} and document["settings"] == []


def test_a_metric_asked_for_is_checked(run: Run) -> None:
    """SGLX_SERVING_METRIC (AIM's AIM_METRIC): no shipped profile is tuned for one metric only,
    so latency keeps them all; a value that is no metric is refused naming the variable."""
    code, out, _ = run("8x MI300X", "llama-3.1-8b", "--list-profiles", "--json",
                       env={"SGLX_SERVING_METRIC": "latency"})  # fmt: skip
    assert code == 0 and json.loads(out)["selected"] == "mi300x-tp8"
    code, out, _ = run("8x MI300X", "llama-3.1-8b", "--dry-run",
                       env={"SGLX_SERVING_METRIC": "fastest"})  # fmt: skip
    assert code == 2 and "SGLX_SERVING_METRIC=fastest is not one of latency, throughput" in out


def test_version_answers_without_a_model_or_devices(run: Run) -> None:
    code, out, _ = run("cpu", "qwen2.5-0.5b", "--version")
    assert code == 0 and out.startswith("sglx-serve ") and out.strip().endswith("(cpu)")


# --- the start ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "model", "args", "said"),
    [
        ("gfx1151", "llama-3.1-70b", (), "no serving profile of gfx1151 can run this model"),
        ("8x MI300X", "llama-3.1-70b", ("--context-length", "10000000"), "does not fit"),
    ],
)
def test_the_server_is_not_started_when_the_model_cannot_fit(
    run: Run,
    monkeypatch: pytest.MonkeyPatch,
    host: str,
    model: str,
    args: tuple[str, ...],
    said: str,
) -> None:
    def started(*_: object, **__: object) -> None:
        raise AssertionError("sglx-serve started something after a refusal")

    monkeypatch.setattr(subprocess, "Popen", started)  # the module serve.py calls
    monkeypatch.setattr(serve, "_preflight", started)
    monkeypatch.setattr(serve, "state_file", lambda: Path("/nonexistent/sglx-serve.json"))
    code, out, err = run(host, model, *args, env={"SGLX_PREFLIGHT": "first"})
    assert code == 2
    assert out == ""
    assert err.startswith("sglx-serve: refused before starting the server: ")
    assert said in err
    assert "hint: " in err


# --- the ranks of a serving group --------------------------------------------------------------


def test_ranks_that_selected_different_profiles_disagree(
    roots: dict[str, Path], models: dict[str, Path]
) -> None:
    """Two nodes of one group, one with 8x MI300X and one with 8x MI325X: each hands its choice
    to the server as SGLX_SERVING_PROFILE, which the rank check compares (an SGLX_ variable that
    is not per node), so the group is refused naming the other host and the variable."""
    profile = load_profile("gfx942")
    assert serving.PROFILE_ENV.startswith(profile.ranks.env_prefixes)
    for arch in ("cpu", "gfx942", "gfx950", "gfx1151", "kunlun"):
        assert serving.PROFILE_ENV not in load_profile(arch).ranks.per_node_env, arch
    model = str(models["llama-3.1-70b"])
    plans = [
        serving.plan(profile, [], {}, model, roots[host]) for host in ("8x MI300X", "8x MI325X")
    ]
    assert [p.env[serving.PROFILE_ENV] for p in plans] == ["mi300x-tp8", "mi325x-tp8"]
    where = ["rank 0 on node-a", "rank 8 on node-b"]
    lines = differences([fingerprint(profile, None, p.env) for p in plans], where)
    assert lines == [
        "env:SGLX_SERVING_PROFILE differs "
        "(rank 0 on node-a: mi300x-tp8; rank 8 on node-b: mi325x-tp8)"
    ]
    same = [fingerprint(profile, None, plans[0].env)] * 2
    assert differences(same, where) == []


def test_own_flags_need_list_or_dry_run() -> None:
    """--json alone is the server's (sglang has flags of its own); --list-profiles/--dry-run
    take it for themselves and never reach the server."""
    assert serving.split_own_flags(["--json", "--tp", "2"]) == (set(), ["--json", "--tp", "2"])
    own, rest = serving.split_own_flags(["--tp", "2", "--dry-run", "--json"])
    assert own == {"--dry-run", "--json"} and rest == ["--tp", "2"]


# --- the user's flags as sglang's parser reads them (issue 37 items 3 and 8) -----------------


def test_an_abbreviated_flag_is_read_as_the_flag_sglang_takes_it_for(run: Run) -> None:
    """`--mem-fraction 0.05` IS `--mem-fraction-static 0.05` to sglang's parser (allow_abbrev):
    the capacity check refuses both alike (before, the abbreviation passed and --dry-run said
    0.8 came from the serving profile), and `--dtype float32` doubles the weights it counts."""
    args = ("--tp", "8", "--context-length", "131072")
    for spelled in ("--mem-fraction-static", "--mem-fraction", "--mem-frac"):
        code, out, _ = run(
            "8x MI300X", "llama-3.1-70b", "--dry-run", "--json", *args, spelled, "0.05"
        )
        assert code == 2, (spelled, out)
        assert json.loads(out)["error"]["code"] == "does_not_fit", (spelled, out)
    # Where it fits, the provenance names the flag sglang took, set by the user.
    code, out, _ = run("8x MI300X", "llama-3.1-70b", "--dry-run", "--json", *args,
                       "--mem-frac", "0.7")  # fmt: skip
    assert code == 0, out
    (fraction,) = [s for s in json.loads(out)["settings"] if s["name"] == "--mem-fraction-static"]
    assert (fraction["value"], fraction["layer"]) == ("0.7", "user argument"), fraction
    code, out, _ = run("8x MI300X", "llama-3.1-70b", "--dry-run", "--json", "--tp", "8",
                       "--dtype", "float32", "--context-length", "1024")  # fmt: skip
    assert code == 0, out
    served = json.loads(out)["capacity"]["weights_bytes_per_device"]
    code, out, _ = run("8x MI300X", "llama-3.1-70b", "--dry-run", "--json", "--tp", "8",
                       "--context-length", "1024")  # fmt: skip
    assert served == 2 * json.loads(out)["capacity"]["weights_bytes_per_device"]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--tp", "abc"), "--tp-size 'abc' is not an integer"),
        (("--tp", "nan"), "--tp-size 'nan' is not an integer"),
        (("--tp", "inf"), "--tp-size 'inf' is not an integer"),
        (("--context-length", "abc"), "--context-length 'abc' is not an integer"),
        (("--context-length", "1e400"), "--context-length '1e400' is not an integer"),
        (("--mem-fraction-static", "abc"), "--mem-fraction-static 'abc' is not a finite number"),
        (("--page-size", "x"), "--page-size 'x' is not an integer"),
        (("--pp", "2"), "--pp is ambiguous"),
        (("--tp", "0"), "--tp is 0; it must be at least 1"),
        (("--no-such-flag",), "--no-such-flag is not an argument of sglang 0.5.23"),
        (("--served-model-name", "--dry-run"), "--served-model-name expects a value"),
    ],
)
def test_a_flag_sglang_would_refuse_is_refused_with_exit_2_and_no_traceback(
    run: Run, args: tuple[str, ...], said: str
) -> None:
    code, out, err = run("8x MI300X", "llama-3.1-70b", *args)
    assert code == 2, out + err
    assert f"refused before starting the server: {said}" in err, err


def test_a_word_that_is_a_flags_value_is_never_sglx_serves_own() -> None:
    """`--version` as the value of --api-key (argparse's `=` form) is the key, not a request
    to print the version and exit."""
    assert serving.split_own_flags(["--api-key=--version"]) == (set(), ["--api-key=--version"])
    own, rest = serving.split_own_flags(["--dry-run", "--api-key=--version", "--tp", "2"])
    assert own == {"--dry-run"} and rest == ["--api-key=--version", "--tp", "2"]


def test_a_disaggregated_role_is_served_only_where_it_is_named(run: Run) -> None:
    """Seed 004's PD split (S4-44): the prefill and decode roles on 8x MI300X are serving
    profiles of their own (MORI-IO), never chosen for a host on its own; SGLX_SERVING_PROFILE
    names one, and its flags reach the command line ahead of the user's."""
    code, out, _ = run("8x MI300X", "llama-3.1-8b", "--dry-run", "--json")
    assert code == 0
    assert json.loads(out)["env"] == {"SGLX_SERVING_PROFILE": "mi300x-tp8"}
    code, out, _ = run("8x MI300X", "llama-3.1-8b", "--list-profiles", "--json")
    listed = {p["name"]: p for p in json.loads(out)["profiles"]}
    prefill = listed["mi300x-pd-prefill-tp8"]
    assert prefill["status"] == "incompatible"
    assert prefill["reason"].startswith("chosen by name only (SGLX_SERVING_PROFILE=")
    named = {"SGLX_SERVING_PROFILE": "mi300x-pd-decode-tp8"}
    code, out, _ = run("8x MI300X", "llama-3.1-8b", "--dry-run", "--json", env=named)
    assert code == 0, out
    command = json.loads(out)["command"]
    tail = command[command.index("--port") + 2 :]
    assert tail == ["--tp", "8", "--disaggregation-mode", "decode",
                    "--disaggregation-transfer-backend", "mori"]  # fmt: skip
