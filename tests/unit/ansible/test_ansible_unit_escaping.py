"""Issue 21, item 3: the server's systemd unit and environment file carry each value as it is.

sglang_service's templates pass every value through the filters of the role sglx_escape: one word
of a command line whatever it holds (a space, quotes, a backslash, `%h`, `$HOME`, a lone `;`),
and a control character refused, by the role's preflight first, naming the variable.

The role is run by the real ansible-playbook over a local inventory (as in
test_ansible_serving_group), and the unit it renders is then read by systemd itself:
`systemd-analyze verify` checks it, and the manager in test mode (`systemd --test`, as an
unprivileged user) loads it and dumps every command line it would run. Those lines are read
back into argv here, so the tests compare what systemd would execute, command by command,
with what was meant: exactly one ExecStartPre, ExecStart and ExecStop, with the intended argv.
The environment file is read as `docker run --env-file` reads it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from helpers.images_copy import copy_images, edit_yaml

from sglx.ansible_vars import render_vars
from sglx_core.device_lock import lock_dir_words
from sglx_core.profile import load_profile

ROOT = Path(__file__).resolve().parents[3]
ANSIBLE = ROOT / "ansible"
ROLE = ANSIBLE / "roles" / "sglang_service"
BIN = Path(sys.executable).parent
IMAGE = "sha256:" + "ab" * 32
UNIT = "sglx-server.service"
# The server unit's stop: `docker stop`, retried while `docker run` (the main process) lives.
STOP_LOOP = 'until "$1" stop -t 30 "$2"; do kill -0 "$MAINPID" 2>/dev/null || exit 0; sleep 1; done'
REMOVE_LOOP = (
    '"$1" rm -f "$2" >/dev/null 2>&1; n=0; while "$1" container inspect "$2" >/dev/null 2>&1; '
    'do [ "$n" -lt "$3" ] || { echo "$2 is still there $3 s after docker rm -f" >&2; exit 1; }; '
    'sleep 1; "$1" rm -f "$2" >/dev/null 2>&1; n=$((n + 1)); done'
)

# The role's preflight, then its two templates written under {{ out }}/HOST/ instead of /etc.
PLAY = """
- hosts: all
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: sglang_service
        tasks_from: preflight
        public: true
    - ansible.builtin.file:
        path: "{{ out }}/{{ inventory_hostname }}"
        state: directory
        mode: "0755"
      delegate_to: localhost
    - ansible.builtin.template:
        src: "{{ role }}/templates/{{ item.src }}"
        dest: "{{ out }}/{{ inventory_hostname }}/{{ item.dest }}"
        mode: "0644"
      loop:
        - {src: server.service.j2, dest: sglx-server.service}
        - {src: server.env.j2, dest: sglx-server.env}
        - {src: gate.service.j2, dest: sglx-server-gate.service}
        - {src: gate.timer.j2, dest: sglx-server-gate.timer}
      vars:
        __sglang_service_device_paths: >-
          {{ __sglang_service_nodes.results | default([]) | map(attribute='files') | flatten
             | map(attribute='path') | sort }}
"""

# Legal values that a naive template would split, unbalance, expand or cut short.
HOSTILE_ARGS = [
    "--served-model-name", "a b",
    "two  spaces", ' lead and trail ', 'dq"uote', "sq'uote", 'unbalanced "', "'",
    "%h", "%%", "%n", "$HOME", "${HOME}", "$$", "$", "back\\slash", "trailing\\", "\\n",
    ";", "", "-", "#not-a-comment", "x=y z", "ünï cødé",
]  # fmt: skip
HOSTILE_ENV = {
    "SPACED": "a b",
    "DOLLAR": "$HOME ${HOME} $$",
    "PERCENT": "%h %%",
    "QUOTES": '\'single\' "double" unbalanced"',
    "HASH": "#not a comment",
    "EQUALS": "x=y",
    "LEAD": "  lead",
    "TRAIL": "trail  ",
    "BACKSLASH": "back\\slash\\",
    "EMPTY": "",
}


@pytest.fixture
def public() -> Iterator[Path]:
    """A folder every user can read: `systemd --test` runs as nobody when the tests run as root."""
    folder = Path(tempfile.mkdtemp(prefix="sglx-unit-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


def local(**more: Any) -> dict[str, Any]:
    return {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "sglang_service_image": IMAGE,
        "sglang_service_env_files": [],
        **more,
    }


def play(work: Path, hosts: dict[str, dict[str, Any]]) -> tuple[int, str]:
    """Run PLAY over `hosts`; (exit code, output with one line per task result)."""
    (work / "inventory.yml").write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    (work / "play.yml").write_text(PLAY)
    done = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(work / "inventory.yml"), str(work / "play.yml"),
         "-e", f"out={work / 'out'}", "-e", f"role={ROLE}"],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg"),
             "ANSIBLE_ROLES_PATH": str(ANSIBLE / "roles"), "ANSIBLE_NOCOLOR": "1",
             "ANSIBLE_CALLBACK_RESULT_FORMAT": "json"},
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr


def failure(out: str, host: str) -> str:
    """The message of the task that failed `host` (of its failed item, in a loop)."""
    for line in out.splitlines():
        if line.startswith((f"fatal: [{host}]: FAILED! => ", f"failed: [{host}] (item=")):
            return str(json.loads(line.split(" => ", 1)[1])["msg"])
    raise AssertionError(f"{host} did not fail:\n{out}")


# --------------------------------------------------------------------------------------------
# What systemd makes of the unit
# --------------------------------------------------------------------------------------------


def systemd_binary() -> Path:
    for path in (Path("/usr/lib/systemd/systemd"), Path("/lib/systemd/systemd")):
        if path.is_file():
            return path
    pytest.skip("systemd is not installed: the unit cannot be read by systemd here")


def verify(unit: Path) -> None:
    """`systemd-analyze verify` accepts the unit and warns about nothing in it."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    done = subprocess.run(
        [analyze, "verify", "--man=no", str(unit)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert unit.name not in done.stderr, done.stderr


# systemd's dump quotes a word that needs it in double quotes, with \ before " \ ` and $
# (quote_command_line, shell_maybe_quote); other words stand bare.
_DUMPED_WORD = re.compile(r'"((?:[^"\\]|\\.)*)"(?= |$)|([^\s"]+)(?= |$)')


def _dumped_words(line: str) -> list[str]:
    words, pos = [], 0
    while pos < len(line):
        found = _DUMPED_WORD.match(line, pos)
        assert found, f"cannot read systemd's command line at {line[pos:]!r}"
        quoted, bare = found.groups()
        words.append(re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else bare)
        pos = found.end() + 1
    return [_at_exec(word) for word in words]


def _at_exec(word: str) -> str:
    """The word as executed: systemd substitutes environment variables only when it runs the
    command, where `$$` becomes `$`. A lone `$` would be a variable: there must be none."""
    assert "$" not in word.replace("$$", ""), f"{word!r} would expand a variable"
    return word.replace("$$", "$")


def commands(unit: Path, work: Path) -> dict[str, list[list[str]]]:
    """Every command line systemd would run for `unit`, by setting: {'ExecStart': [argv]}."""
    folder = work / "test-mode"
    folder.mkdir(mode=0o755)
    # In test mode the manager has no sysinit.target to order the unit after.
    text = unit.read_text().replace("[Unit]\n", "[Unit]\nDefaultDependencies=no\n", 1)
    (folder / unit.name).write_text(text)
    (folder / unit.name).chmod(0o644)
    as_nobody: dict[str, Any] = (
        {"user": 65534, "group": 65534, "extra_groups": []} if os.geteuid() == 0 else {}
    )  # the manager refuses test mode as root
    done = subprocess.run(
        [str(systemd_binary()), "--test", "--system", f"--unit={unit.name}", "--no-pager"],
        capture_output=True, text=True, timeout=60, check=False, **as_nobody,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(folder),
             "SYSTEMD_UNIT_PATH": str(folder), "SYSTEMD_LOG_TARGET": "console"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    found: dict[str, list[list[str]]] = {}
    inside, setting = False, ""
    for line in done.stdout.splitlines():
        text = line.strip()
        if text.startswith("-> Unit "):
            inside = text == f"-> Unit {unit.name}:"
        elif inside and re.fullmatch(r"-> Exec\w+:", text):
            setting = text[3:-1]
            found.setdefault(setting, [])
        elif inside and setting and text.startswith("Command Line: "):
            found[setting].append(_dumped_words(text.removeprefix("Command Line: ")))
    assert found, done.stdout
    return found


def docker_env_file(text: str) -> dict[str, str]:
    """What `docker run --env-file` reads (docker/cli opts/envfile.go): one line each, leading
    white space and `#` lines skipped, NAME=value with the value taken verbatim."""
    found = {}
    for line in text.split("\n"):
        line = line.lstrip()
        if line and not line.startswith("#"):
            name, sep, value = line.partition("=")
            assert sep and name == name.strip(), line
            found[name] = value
    return found


# --------------------------------------------------------------------------------------------
# Legal values: one word, one value each
# --------------------------------------------------------------------------------------------


def test_hostile_but_legal_values_reach_systemd_and_docker_unchanged(public: Path) -> None:
    # The docker CLI, a mount, the model folder, a device and an env file at paths that need
    # quoting, each present (systemd-analyze checks the executable, preflight the others).
    # No `$` in them: Ansible's modules expand variables in a path (`$` is tested elsewhere).
    odd = public / "odd %h 'q' \"q\" dir"
    odd.mkdir()
    # systemd runs no executable whose name holds a quote or a backslash (preflight says so).
    (public / "bin %h dir").mkdir()
    docker = public / "bin %h dir" / "docker"
    shutil.copy("/bin/true", docker)
    (odd / "weights").mkdir()
    (odd / "dev node0").touch()
    (odd / "accel env").write_text("X=1\n")
    security = ["label=type:a b", "seccomp=/etc/x %h $HOME;.json"]
    options = [
        "--ipc", "private", "--shm-size", "1g", "--cap-add", "SYS_PTRACE",
        "--security-opt", security[0], "--security-opt", security[1],
        "--ulimit", "memlock=-1", "--ulimit", "nofile=1024:1024",
    ]  # fmt: skip
    lock = ["-v", f"{odd / 'lock'}:/run/lock x:ro", "-e", "SGLX_LOCK_DIR=/run/lock x"]
    host = local(
        sglang_service_docker=str(docker),
        sglang_service_args=HOSTILE_ARGS,
        sglang_service_run_options=options,
        sglang_service_mounts=[{"source": str(odd / "weights"), "target": "/models/x y",
                                "read_only": True, "required": True}],
        sglang_service_devices=[{"path": str(odd / "dev node*"), "required": True}],
        sglang_service_lock_dir={"source": str(odd / "lock"), "target": "/run/lock x",
                                 "env": {"SGLX_LOCK_DIR": "/run/lock x"}, "args": lock},
        sglang_service_model_dir=str(odd / "weights"),
        sglang_service_env_files=[str(odd / "accel env")],
        sglang_service_env={"SPACED": "profile's value"},
        sglang_service_extra_env=HOSTILE_ENV,
        sglx_arch="cpu %n",
        sglang_service_gate_textfile_dir=str(odd / "textfile %h dir"),
        sglang_service_gate_timer_record=str(odd / "gate $HOME.json"),
        sglang_service_gate_speed_floors={"min_output_tok_s": 900},
        sglang_service_gate_speed_record=str(odd / "speed %h.json"),
    )  # fmt: skip
    code, out = play(public, {"node": host})
    assert code == 0, out
    unit = public / "out" / "node" / UNIT
    verify(unit)
    assert "Description=SGLang server (sglx cpu %%n, image " in unit.read_text()

    run = [
        str(docker), "run", "--name", "sglx-server", "-p", "30000:30000",
        *options, "--device", str(odd / "dev node0"),
        "-v", f"{odd / 'weights'}:/models/x y:ro", *lock,
        "-v", f"{odd / 'weights'}:/models/model:ro",
        "--env-file", str(odd / "accel env"), "--env-file", "/etc/sglx/sglx-server.env",
        IMAGE, *HOSTILE_ARGS,
    ]  # fmt: skip
    # Exactly these three commands, nothing before, after or beside them.
    assert commands(unit, public) == {
        "ExecStartPre": [
            ["/bin/sh", "-c", REMOVE_LOOP, "sglx-remove", str(docker), "sglx-server", "60"]
        ],
        "ExecStart": [run],
        "ExecStop": [["/bin/sh", "-c", STOP_LOOP, "sglx-stop", str(docker), "sglx-server"]],
    }
    env = (public / "out" / "node" / "sglx-server.env").read_text()
    assert docker_env_file(env) == HOSTILE_ENV

    # The gate timer's service (issue 41) runs the role's script with the same values, each
    # one word; the timer starts it every sglang_service_gate_timer_minutes.
    gate, timer = (
        public / "out" / "node" / f"sglx-server-gate.{kind}" for kind in ("service", "timer")
    )
    analyze = shutil.which("systemd-analyze")
    assert analyze is not None
    checked = subprocess.run([analyze, "verify", "--man=no", str(gate), str(timer)],
                             capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert checked.returncode == 0 and gate.name not in checked.stderr, checked.stderr
    assert "OnUnitActiveSec=15min\nUnit=sglx-server-gate.service\n" in timer.read_text()
    (public / "gate").mkdir(mode=0o755)
    assert commands(gate, public / "gate") == {"ExecStart": [[
        "/usr/bin/python3", "/usr/local/libexec/sglx/sglx-gate-tick",
        "--container", "sglx-server", "--url", "http://127.0.0.1:30000", "--host", "node",
        "--unit", "sglx-server.service", "--docker", str(docker),
        "--textfile", str(odd / "textfile %h dir" / "sglx_gate.prom"),
        "--record", str(odd / "gate $HOME.json"), "--remediation", "alert",
        "--max-restarts", "1", "--window", "3600",
        # the speed check every sglang_service_gate_timer_speed_hours, with the site's floors
        "--speed-every", "86400", "--speed-floors", '{"min_output_tok_s": 900}',
        "--speed-slos", "{}", "--speed-record", str(odd / "speed %h.json"),
        "--speed-timeout", "300",
        "--interval", "900", "--timeout", "300",
    ]]}  # fmt: skip


def test_a_plain_unit_is_written_as_before(public: Path) -> None:
    """Plain words stay bare: the unit an operator reads (and the e2e edits) keeps its shape.
    The profile's device-init lock folder is mounted with the words install.sh prints, and so
    is the image's node-local JIT cache folder."""
    profile = load_profile("cpu")
    lock_vars = render_vars(profile)["sglang_service_lock_dir"]
    jit_vars = render_vars(profile)["sglang_service_jit_cache"]
    host = local(
        sglang_service_args=["--tp", "2"],
        sglang_service_lock_dir=lock_vars,
        sglang_service_jit_cache=jit_vars,
    )
    code, out = play(public, {"node": host})
    assert code == 0, out
    text = (public / "out" / "node" / UNIT).read_text()
    assert "sglx-remove /usr/bin/docker sglx-server 60\n" in text
    lock_words = lock_dir_words(profile)
    assert lock_words == [
        "-v",
        "/run/lock/sglx:/run/lock/sglx:ro",
        "-e",
        "SGLX_LOCK_DIR=/run/lock/sglx",
    ]
    assert f"\n  {' '.join(lock_words)} \\\n" in text
    folder = "/var/cache/sglx/jit/" + IMAGE.removeprefix("sha256:")
    assert f"\n  -v {folder}:/var/cache/sglx \\\n  -e SGLX_JIT_CACHE_HOST={folder} \\\n" in text
    assert f"\n  {IMAGE} --tp 2\n" in text
    # (the start's and the stop's shell loops are the quoted words)
    assert not [
        line
        for line in text.splitlines()
        if '"' in line and not line.startswith(("ExecStop=", "ExecStartPre="))
    ]


def test_the_stop_waits_for_a_container_still_being_created(public: Path) -> None:
    """A restart that comes while `docker run` is still creating the container (a crash loop's
    next start, then a rollback) finds no container yet: the stop, as systemd runs it, asks
    again while the client lives, so the create finishes before the client is killed and the
    next start's `rm -f` finds it; with the client gone it ends at once."""
    code, out = play(public, {"node": local()})
    assert code == 0, out
    [stop] = commands(public / "out" / "node" / UNIT, public)["ExecStop"]
    calls = public / "calls"
    docker = public / "docker"
    docker.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >>{calls}\n'
        f'[ "$(wc -l <{calls})" -ge 3 ] || {{ echo "No such container: $4" >&2; exit 1; }}\n'
    )
    docker.chmod(0o755)
    argv = [*stop[:4], str(docker), *stop[5:]]
    with subprocess.Popen(["sleep", "60"]) as client:
        try:
            done = subprocess.run(argv, env={"MAINPID": str(client.pid)}, capture_output=True,
                                  text=True, timeout=30, check=False)  # fmt: skip
        finally:
            client.kill()
    assert done.returncode == 0, done.stderr
    assert calls.read_text().splitlines() == ["stop -t 30 sglx-server"] * 3
    calls.write_text("")  # the client exited (the server crashed): one try, then done
    done = subprocess.run(argv, env={"MAINPID": str(client.pid)}, capture_output=True,
                          timeout=30, check=False)  # fmt: skip
    assert done.returncode == 0 and calls.read_text().splitlines() == ["stop -t 30 sglx-server"]


def test_the_start_waits_until_the_engine_has_removed_the_old_container(public: Path) -> None:
    """CI-I's e2e failure: a removal an earlier start asked for goes on in the engine after
    systemd killed that start's client, and meanwhile `rm -f` answers "already in progress" while
    the name stays taken. The start, as systemd runs it, asks again each second until the engine
    no longer holds the container, and fails naming it when its bound passes."""
    code, out = play(public, {"node": local()})
    assert code == 0, out
    [remove] = commands(public / "out" / "node" / UNIT, public)["ExecStartPre"]
    calls, docker = public / "calls", public / "docker"
    # The engine holds the container until the third `inspect`; `rm -f` fails meanwhile.
    docker.write_text(
        "#!/bin/sh\n"
        f'echo "$1" >>{calls}\n'
        f'[ "$1" = container ] && exec [ "$(grep -c container {calls})" -lt 3 ]\n'
        'echo "removal of container $3 is already in progress" >&2; exit 1\n'
    )
    docker.chmod(0o755)
    argv = [*remove[:4], str(docker), *remove[5:]]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    assert calls.read_text().split() == ["rm", "container", "rm", "container", "rm", "container"]
    # A container the engine never lets go: the start fails after its bound, naming it.
    calls.write_text("")
    docker.write_text(f'#!/bin/sh\necho "$1" >>{calls}\n[ "$1" = container ]\n')
    done = subprocess.run([*argv[:-1], "2"], capture_output=True, text=True, timeout=30,
                          check=False)  # fmt: skip
    assert done.returncode == 1
    assert done.stderr == "sglx-server is still there 2 s after docker rm -f\n"
    assert calls.read_text().split().count("rm") == 3


# --------------------------------------------------------------------------------------------
# Control characters and malformed names: refused by preflight, nothing rendered
# --------------------------------------------------------------------------------------------

INJECT = "\nExecStartPost=/bin/touch /tmp/pwned"
REFUSED: dict[str, tuple[dict[str, Any], str]] = {
    "arg-newline": (
        {"sglang_service_args": ["--tp", "2" + INJECT]},
        "sglang_service_args[1] holds a control character",
    ),
    "arg-carriage-return": (
        {"sglang_service_args": ["a\rb"]},
        "sglang_service_args[0] holds a control character",
    ),
    "image-newline": (
        {"sglang_service_image": IMAGE + INJECT},
        "sglang_service_image holds a control character",
    ),
    "image-not-an-id": (
        {"sglang_service_image": "probe/tiny:1; touch /tmp/pwned"},
        "sglang_service_image (or sglang_service_engine_image) is "
        '["probe/tiny:1; touch /tmp/pwned", ""], not an image id (sha256: and 64 lowercase hex '
        "digits): rollout.yml sets them from the bundle (bundle_install_image_id, "
        "bundle_install_engine_image_id); set them to the id of an image the engine holds "
        "(`docker image inspect --format '{{.Id}}' IMAGE`)",
    ),
    "engine-image-not-an-id": (
        {"sglang_service_engine_image": "sha256:" + "a" * 64 + " --privileged"},
        "not an image id (sha256: and 64 lowercase hex digits)",
    ),
    "security-opt-newline": (
        {"sglang_service_run_options": ["--security-opt", "seccomp=unconfined" + INJECT]},
        "sglang_service_run_options[1] holds a control character",
    ),
    "security-opt-delete": (
        {"sglang_service_run_options": ["--security-opt", "label\x7fdisable"]},
        "sglang_service_run_options[1] holds a control character",
    ),
    "env-value-newline": (
        {"sglang_service_extra_env": {"X": "1\nLD_PRELOAD=/tmp/evil.so"}},
        "sglang_service_extra_env.X holds a control character",
    ),
    "env-key-newline": (
        {"sglang_service_extra_env": {"X\nLD_PRELOAD": "/tmp/evil.so"}},
        "sglang_service_extra_env (the key 'X\\nLD_PRELOAD') holds a control character",
    ),
    "env-key-not-a-name": (
        {"sglang_service_extra_env": {"LD-PRELOAD": "/tmp/evil.so"}},
        'sglang_service_extra_env sets "LD-PRELOAD": an environment variable name is letters',
    ),
    "profile-env-tab": (
        {"sglang_service_env": {"A": "x\ty"}},
        "sglang_service_env.A holds a control character",
    ),
    "profile-env-name": (
        {"sglang_service_env": {"1A": "x"}},
        'sglang_service_env sets "1A": an environment variable name',
    ),
    "lock-dir-newline": (
        {"sglang_service_lock_dir": {"source": "/run/lock/x", "args": ["-v", "/a:/b" + INJECT]}},
        "sglang_service_lock_dir.args[1] holds a control character",
    ),
    "jit-cache-newline": (
        {"sglang_service_jit_cache": {"target": "/var/cache/sglx" + INJECT, "host_root": "/j"}},
        "sglang_service_jit_cache.target holds a control character",
    ),
    "jit-root-colon": (
        {
            "sglang_service_jit_cache": {
                "target": "/var/cache/sglx",
                "host_root": "/j",
                "uid": 1,
                "mode": "0700",
                "env": "SGLX_JIT_CACHE_HOST",
            },
            "sglang_service_jit_cache_root": "/srv/a:/etc",
        },
        'the node-local JIT cache root is "/srv/a:/etc" (sglang_service_jit_cache_root',
    ),
    "group-address-newline": (
        {"sglang_service_group_address": "10.0.0.1" + INJECT},
        "sglang_service_group_address holds a control character",
    ),
    "unit-name-outside-etc": (
        {"sglang_service_name": "../../tmp/x"},
        'sglang_service_name is "../../tmp/x"',
    ),
    "docker-not-absolute": (
        {"sglang_service_docker": "-docker"},
        'sglang_service_docker "-docker": a unit or container name',
    ),
    "docker-with-a-quote": (
        {"sglang_service_docker": '/opt/"docker'},
        "and the docker CLI is an absolute path with no quote or backslash",
    ),
}


def test_control_characters_and_bad_names_are_refused_before_anything_is_rendered(
    public: Path,
) -> None:
    hosts = {name: local(**values) for name, (values, _) in REFUSED.items()}
    code, out = play(public, hosts)
    assert code != 0
    for name, (_, words) in REFUSED.items():
        said = failure(out, name)
        assert words in said, (name, said)
        if "control character" in words:
            assert "which would start a new line in the server's systemd unit" in said
        assert not (public / "out" / name).exists(), name
    assert "pwned" not in "".join(p.read_text() for p in (public / "out").rglob("*.*"))


# --------------------------------------------------------------------------------------------
# The profile side: `sglx arch validate` refuses a control character in any profile string
# --------------------------------------------------------------------------------------------


def line_of(path: Path, marker: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if marker in line)


@pytest.mark.parametrize(
    ("file", "changes", "key_path", "shown", "marker"),
    [
        ("shared/rocm.yaml", {"container": {"security_opt": ["seccomp=x\nExecStartPost=/bin/id"]}},
         "container.security_opt[0]", "'seccomp=x\\nExecStartPost=/bin/id' (a string)",
         "seccomp=x"),
        ("shared/rocm.yaml", {"env": {"HIP_X": "1\tLD_PRELOAD=/tmp/evil.so"}},
         "env.HIP_X", "'1\\tLD_PRELOAD=/tmp/evil.so' (a string)", "HIP_X"),
        ("shared/rocm.yaml", {"env": {"A\nLD_PRELOAD": "x"}},
         "env", "the key 'A\\nLD_PRELOAD'", "? 'A"),
        ("gfx942/arch.yaml", {"server": {"defaults": {"chat_template": "a\x1b[31mb"}}},
         "server.defaults.chat_template", "'a\\x1b[31mb' (a string)", "chat_template"),
        ("gfx942/arch.yaml", {"description": "MI300X\x7f"},
         "description", "'MI300X\\x7f' (a string)", "description:"),
    ],
)  # fmt: skip
def test_validate_refuses_a_control_character_in_any_profile_string(
    sglx: Any,
    tmp_path: Path,
    file: str,
    changes: dict[str, Any],
    key_path: str,
    shown: str,
    marker: str,
) -> None:
    images = copy_images(tmp_path)
    edit_yaml(images / file, changes)
    line = line_of(images / file, marker)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    code, out, err = sglx("arch", "validate", str(images / "gfx942" / "arch.yaml"))
    assert code == 1, out + err
    assert "Traceback" not in err
    where = f"{images / file}:{line}: {key_path}: " if key_path else f"{images / file}:{line}: "
    assert f"finding [invalid_profile] {where}{shown} holds the control character" in out, out
    assert "where it would start a new line" in out
    assert "hint: remove it: a profile value is one line of printable text" in out
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_arch_show_stops_on_a_control_character(
    sglx: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    images = copy_images(tmp_path)
    monkeypatch.setenv("SGLX_IMAGES_DIR", str(images))
    profile = images / "gfx942" / "arch.yaml"
    edit_yaml(profile, {"container": {"security_opt": ["a\nExecStartPre=/bin/id"]}})
    code, out, err = sglx("arch", "show", "gfx942")
    assert code == 2
    assert out == ""
    line = line_of(profile, "- 'a")  # where the item starts (YAML folds it over lines)
    assert f"sglx: error: {profile}:{line}: container.security_opt[0]: " in err
    assert "holds the control character '\\n'" in err


# --------------------------------------------------------------------------------------------
# The filters and the templates
# --------------------------------------------------------------------------------------------


def _plugin() -> ModuleType:
    path = ROLE.parent / "sglx_escape" / "filter_plugins" / "sglx_escape.py"
    spec = importlib.util.spec_from_file_location("sglx_escape", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


systemd_filters = _plugin()


@pytest.mark.parametrize("char", ["\n", "\r", "\t", "\x00", "\x1b", "\x7f"])
def test_every_filter_refuses_a_control_character(char: str) -> None:
    """The templates' own guard, should a value reach them without preflight."""
    for name in ("sglx_systemd_word", "sglx_systemd_text", "sglx_env_name", "sglx_env_value"):
        with pytest.raises(AnsibleFilterError, match="control character"):
            getattr(systemd_filters, name)(f"a{char}b")
    with pytest.raises(AnsibleFilterError, match="control character"):
        systemd_filters.sglx_systemd_words(["ok", f"a{char}b"])


def test_words_take_a_list_not_a_string() -> None:
    with pytest.raises(AnsibleFilterError, match="expected a list, found str"):
        systemd_filters.sglx_systemd_words("--tp 2")
    assert systemd_filters.sglx_systemd_words(["--tp", 2, "a b"]) == '--tp 2 "a b"'


@pytest.mark.parametrize(
    ("template", "filters"),
    [
        ("server.service.j2", ("sglx_systemd_word", "sglx_systemd_words", "sglx_systemd_text",
                               "int")),
        ("server.env.j2", ("sglx_env_name", "sglx_env_value")),
    ],
)  # fmt: skip
def test_every_value_a_template_writes_passes_through_a_filter(
    template: str, filters: tuple[str, ...]
) -> None:
    text = (ROLE / "templates" / template).read_text()
    for expression in re.findall(r"\{\{(.*?)\}\}", text, flags=re.S):
        last = expression.rsplit("|", 1)[-1].strip()
        if expression.strip() == "ansible_managed | comment":
            continue
        assert last in filters, f"{template}: {{{{{expression}}}}} is written unfiltered"
