"""The value the service runs with goes with its flags: the run spec (sglx.run_spec, through
`sglx ansible vars`) raises GPU_MAX_HW_QUEUES to the profile's floor (5) when the environment
switches multi-stream MoE on (SGLANG_ROCM_USE_MULTI_STREAM=1), leaves the host's tuned value (2,
from accel.env) to dense serving, and keeps a higher value of its own. The sglang_service
role's environment file, rendered by real ansible-playbook (local connection), writes the
spec's environment as it is: the rule lives in Python once (sglx_core.env_floors), not in the
template. A variable a site adds (sglang_service_extra_env) is written as given; the server's
preflight checks the floors on what it gets."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sglx.ansible_vars import render_vars
from sglx_core.profile import load_profile

ANSIBLE = Path(__file__).resolve().parents[2] / "ansible"
BIN = Path(sys.executable).parent
CASES = {
    "multi_stream": {"SGLANG_ROCM_USE_MULTI_STREAM": "1"},
    "dense": {},
    "site_value": {"SGLANG_ROCM_USE_MULTI_STREAM": "1", "GPU_MAX_HW_QUEUES": "8"},
}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    work = tmp_path_factory.mktemp("env-floors")
    profile = load_profile("gfx942")
    rendered = {
        case: render_vars(profile.model_copy(update={"env": {**profile.env, **env}}))
        for case, env in CASES.items()
    }
    assert all(v.keys() == rendered["dense"].keys() for v in rendered.values())
    per_case = {case: v["sglang_service_env"] for case, v in rendered.items()}
    profile_vars = work / "gfx942.yml"
    # each case's environment goes in as the task's variable (extra vars would win over it)
    common = {k: v for k, v in rendered["dense"].items() if k != "sglang_service_env"}
    profile_vars.write_text(yaml.safe_dump(common))
    template = ANSIBLE / "roles" / "sglang_service" / "templates" / "server.env.j2"
    play = [{
        "hosts": "localhost", "connection": "local", "gather_facts": False,
        "tasks": [{
            "name": "Render the server's environment file",
            "ansible.builtin.template": {
                "src": str(template), "dest": f"{work}/{{{{ item.key }}}}.env", "mode": "0644",
            },
            # the role's defaults this template reads (rendered here outside the role)
            "vars": {"sglang_service_env": "{{ item.value }}",
                     "sglang_service_extra_env": {"SITE_ADDED": "1"},
                     "sglang_service_metrics": True,
                     "sglang_service_image": "", "sglang_service_bundle_digest": ""},
            "loop": "{{ cases | dict2items }}",
        }],
    }]  # fmt: skip
    (work / "play.yml").write_text(yaml.safe_dump(play))
    (work / "cases.yml").write_text(yaml.safe_dump({"cases": per_case}))
    done = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "localhost,", str(work / "play.yml"),
         "-e", f"@{profile_vars}", "-e", f"@{work / 'cases.yml'}",
         "-e", f"ansible_python_interpreter={sys.executable}"],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
             # the template's escaping filters are the role's own (rendered here outside it)
             "ANSIBLE_FILTER_PLUGINS": str(ANSIBLE / "roles/sglx_escape/filter_plugins")},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    files = {}
    for case in CASES:
        lines = (work / f"{case}.env").read_text().splitlines()
        files[case] = dict(line.split("=", 1) for line in lines if "=" in line and line[0] != "#")
    return files


def test_multi_stream_raises_the_queues_to_the_floor(rendered: dict[str, dict[str, str]]) -> None:
    env = rendered["multi_stream"]
    assert env["GPU_MAX_HW_QUEUES"] == "5"
    assert env["SITE_ADDED"] == "1"


def test_dense_serving_keeps_the_host_tuned_value(rendered: dict[str, dict[str, str]]) -> None:
    # Not in server.env: accel.env's GPU_MAX_HW_QUEUES=2 (the profile's host.gpu_max_hw_queues)
    assert "GPU_MAX_HW_QUEUES" not in rendered["dense"]


def test_a_site_value_above_the_floor_is_kept(rendered: dict[str, dict[str, str]]) -> None:
    assert rendered["site_value"]["GPU_MAX_HW_QUEUES"] == "8"
