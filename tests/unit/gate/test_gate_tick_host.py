"""The host's side of the gate timer (role sglang_service, files/sglx-gate-tick.py): what it
reads is untrusted (the container's answer, the last record a hand may have edited, the slot
files a fleet shares), so no input of any shape gives a traceback, and the fleet-wide cap lets
no more than K hosts remediate at once, even when they all try together.

The script calls `docker` and `systemctl`; here they are small stand-in scripts (this machine
runs no systemd): `docker` answers with a fixed JSON and `systemctl` logs what it was asked.
The e2e runs the script on a real systemd host against the real server."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "ansible/roles/sglang_service/files/sglx-gate-tick.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sglx_gate_tick", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


tick = load()

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
ACTION = st.fixed_dictionaries(
    {},
    optional={
        "action": st.sampled_from(["alert", "restart", "stop", "reboot", ""]) | JSON,
        "at": st.floats(allow_nan=True) | st.integers() | st.booleans() | JSON,
        "why": JSON,
    },
)
RECORD = st.fixed_dictionaries({}, optional={"actions": st.lists(ACTION | JSON, max_size=6) | JSON})


def answer(passed: bool) -> dict[str, Any]:
    checks = {
        "health": {"passed": True, "message": "ok"},
        "numerics": {"passed": passed, "message": "match" if passed else "drift"},
    }
    series = f'sglx_gate_check_passed{{check="numerics"}} {float(passed)}\n'
    return {"record": {"passed": passed, "checks": checks}, "textfile": series}


@given(code=st.integers(-3, 300), stdout=st.binary(max_size=200), stderr=st.binary(max_size=50))
def test_any_bytes_from_the_container_are_judged_without_a_traceback(
    code: int, stdout: bytes, stderr: bytes
) -> None:
    got, out, problem = tick.parse_answer(code, stdout, stderr)
    assert ((got, out is None) == (2, True) and problem) or got in (0, 1)


@given(code=st.sampled_from([0, 1]), body=JSON | st.fixed_dictionaries(
    {"record": JSON | st.fixed_dictionaries({"checks": JSON}), "textfile": JSON}))  # fmt: skip
def test_any_json_from_the_container_is_the_gates_shape_or_could_not_judge(
    code: int, body: Any
) -> None:
    got, out, problem = tick.parse_answer(code, json.dumps(body).encode(), b"")
    if out is None:
        assert got == 2 and "not the gate's JSON" in problem
    else:  # what main reads of it is there, with the types it reads
        assert got == code and isinstance(out["textfile"], str)
        assert all(isinstance(c, dict) for c in out["record"]["checks"].values())


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(record=RECORD | JSON)
def test_a_hand_edited_record_keeps_only_well_formed_actions(record: Any, tmp_path: Path) -> None:
    path = tmp_path / "gate.json"
    path.write_text(json.dumps(record))
    now = 1_000_000.0
    kept = tick.previous_actions(path, now, 3600.0)
    for action in kept:  # what remediate reads: a known action, a time within the window
        assert action["action"] in tick.ACTIONS
        assert 0 <= now - action["at"] < 3600.0


CLAIM = st.fixed_dictionaries(
    {},
    optional={
        "host": st.sampled_from(["host-a", "host-b"]) | JSON,
        "action": st.sampled_from(["restart", "stop"]) | JSON,
        "at": st.sampled_from([0.0, 999_000.0, 1e400]) | JSON,
    },
)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(held=st.lists(st.none() | st.binary(max_size=40) | CLAIM.map(json.dumps), max_size=2))
def test_hand_edited_slot_files_never_break_a_claim(held: list[Any], tmp_path: Path) -> None:
    """Whatever the fleet's folder holds (nothing, bytes, any JSON, a claim of any shape), a
    claim either takes a free or lapsed slot, keeps this host's own, or names the holders;
    it never raises, and it only ever writes this host's claim."""
    folder = tmp_path / "slots"
    folder.mkdir(exist_ok=True)
    for old in folder.iterdir():
        old.unlink()
    for n, content in enumerate(held):
        if content is not None:
            (folder / f"slot-{n}.json").write_bytes(
                content if isinstance(content, bytes) else content.encode()
            )
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    now, mine = 1_000_000.0, {"host": "host-b", "action": "restart", "at": 1_000_000.0}
    claimed, holders = tick.FleetSlots(folder, 2, "host-b").claim("restart", now, 3600.0)
    after = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert all(isinstance(h, str) for h in holders)
    for name in before.keys() | after.keys():
        if before.get(name) != after.get(name):  # taken: a free slot or a lapsed restart claim
            assert tick.read_json(folder / name) == mine
            assert name not in before or tick.FleetSlots._lapsed(
                json.loads(before[name]), now, 3600.0
            )
    claims = [tick.read_json(folder / n) for n in after]
    if claimed:
        assert holders == [] and any(
            isinstance(c, dict) and c.get("host") == "host-b" for c in claims
        )
    else:
        assert len(holders) == 2 and mine not in claims


def test_a_torn_or_huge_record_counts_as_no_actions(tmp_path: Path) -> None:
    path = tmp_path / "gate.json"
    for text in ('{"actions": [{"action": "restart", "at": 1', "[" * 100_000,
                 " " * (tick.MAX_RECORD_BYTES + 1) + "{}"):  # fmt: skip
        path.write_text(text)
        assert tick.previous_actions(path, time.time(), 3600.0) == []


def stand_ins(
    folder: Path,
    passed: bool,
    answered: dict[str, Any] | None = None,
    stats: Sequence[str] = ("1.5GiB / 23.47GiB",),
) -> tuple[Path, Path, Path]:
    """`docker` answering `stats` with a memory use (the n-th call the n-th of `stats`, then
    the last) and `exec` with the gate's JSON (exit 0 or 1; `answered`, else `answer(passed)`),
    logging the exec's argv; `systemctl` logging its argv."""
    folder.mkdir(parents=True, exist_ok=True)
    said, log = folder / "answer.json", folder / "systemctl.log"
    said.write_text(json.dumps(answered or answer(passed)))
    figures, asked = folder / "stats.txt", folder / "stats.calls"
    figures.write_text("".join(f"{figure}\n" for figure in stats))
    docker, systemctl = folder / "docker", folder / "systemctl"
    docker.write_text(
        f'#!/bin/sh\nif [ "$1" = stats ]; then echo >>{asked}; n=$(wc -l <{asked})\n'
        f'  line=$(sed -n "${{n}}p" {figures}); echo "${{line:-$(tail -n 1 {figures})}}"; exit 0\n'
        f'fi\necho "$@" >{folder / "exec.argv"}\ncat {said}\nexit {0 if passed else 1}\n'
    )
    systemctl.write_text(f'#!/bin/sh\necho "$@" >>{log}\n')
    docker.chmod(0o755)
    systemctl.chmod(0o755)
    return docker, systemctl, log


def run_tick(
    tmp: Path,
    host: str,
    passed: bool,
    *extra: str,
    answered: dict[str, Any] | None = None,
    stats: Sequence[str] = ("1.5GiB / 23.47GiB",),
) -> tuple[int, str, list[str]]:
    docker, *_ = stand_ins(tmp / host, passed, answered, stats)
    return run_tick_with(tmp, host, docker, *extra)


def run_tick_with(tmp: Path, host: str, docker: Path, *extra: str) -> tuple[int, str, list[str]]:
    """The script with the stand-ins in tmp/host, `docker` the one given."""
    systemctl, log = tmp / host / "systemctl", tmp / host / "systemctl.log"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--container", "c", "--url", "http://127.0.0.1:1",
         "--host", host, "--unit", "sglx-server.service", "--docker", str(docker),
         "--systemctl", str(systemctl), "--textfile", str(tmp / host / "sglx_gate.prom"),
         "--record", str(tmp / host / "gate.json"), *extra],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr
    calls = log.read_text().splitlines() if log.exists() else []
    return done.returncode, done.stdout + done.stderr, calls


def test_a_record_edited_by_hand_neither_crashes_the_run_nor_lifts_the_rate_limit(
    tmp_path: Path,
) -> None:
    record = tmp_path / "host-a" / "gate.json"
    record.parent.mkdir()
    now = time.time()
    record.write_text(json.dumps({"actions": [{"at": now}, {"action": "restart", "at": "x"},
                                              {"action": "restart", "at": now - 10}]}))  # fmt: skip
    code, said, calls = run_tick(tmp_path, "host-a", False, "--remediation", "restart")
    assert code == 1 and "rate limited" in said, said
    assert calls == []
    kept = json.loads(record.read_text())["actions"]
    assert [a["action"] for a in kept] == ["restart"], kept


def test_the_fleet_cap_lets_one_host_remediate_and_the_next_alert_until_it_passes(
    tmp_path: Path,
) -> None:
    slots = tmp_path / "shared"
    slots.mkdir()
    cap = ("--remediation", "restart", "--fleet-slots", str(slots), "--fleet-max", "1")
    code, said, calls = run_tick(tmp_path, "host-a", False, *cap)
    assert (code, calls) == (1, ["restart sglx-server.service"]), said
    code, said, calls = run_tick(tmp_path, "host-b", False, *cap)
    assert calls == [] and "the fleet's cap: 1 hosts in remediation already: host-a" in said
    # host-a's gate passes again: it lets go of its slot, and host-b may act.
    assert run_tick(tmp_path, "host-a", True, *cap)[0] == 0
    assert list(slots.iterdir()) == []
    code, said, calls = run_tick(tmp_path, "host-b", False, *cap)
    assert calls == ["restart sglx-server.service"], said
    # A stop's claim outlives the window (the host is out until an operator acts).
    code, said, calls = run_tick(tmp_path, "host-c", False, *cap[:1], "stop", *cap[2:],
                                 "--window", "1")  # fmt: skip
    assert calls == [] and "host-b" in said, said


def test_a_restart_claim_lapses_after_the_window_and_a_stop_claim_does_not(
    tmp_path: Path,
) -> None:
    old = time.time() - 7200
    fleet = tick.FleetSlots(tmp_path, 1, "host-b")
    slot = tmp_path / "slot-0.json"
    slot.write_text(json.dumps({"host": "host-a", "action": "restart", "at": old}))
    assert fleet.claim("restart", time.time(), 3600.0) == (True, [])
    assert json.loads(slot.read_text())["host"] == "host-b"
    slot.write_text(json.dumps({"host": "host-a", "action": "stop", "at": old}))
    assert fleet.claim("restart", time.time(), 3600.0) == (False, ["host-a"])
    slot.write_text("not json")  # a foreign file: left to an operator
    assert fleet.claim("restart", time.time(), 3600.0) == (False, ["slot-0.json"])


def test_two_hosts_taking_over_one_lapsed_claim_keep_the_first_takers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """host-c read the lapsed claim before host-b took the slot over: it finds host-b's fresh
    claim when it comes to remove it, keeps it, and only alerts (the cap holds)."""
    lapsed = {"host": "host-a", "action": "restart", "at": time.time() - 7200}
    slot = tmp_path / "slot-0.json"
    slot.write_text(json.dumps(lapsed))
    assert tick.FleetSlots(tmp_path, 1, "host-b").claim("restart", time.time(), 3600.0)[0]
    real, stale = tick.read_json, [lapsed]
    monkeypatch.setattr(tick, "read_json", lambda path: stale.pop() if stale else real(path))
    assert tick.FleetSlots(tmp_path, 1, "host-c").claim("restart", time.time(), 3600.0) == (
        False,
        ["host-b"],
    )
    assert json.loads(slot.read_text())["host"] == "host-b"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["slot-0.json"]


def test_a_dead_hosts_guard_is_removed_after_the_window(tmp_path: Path) -> None:
    """A guard file is a host's between reading a claim again and removing it: one older than
    the window is a host's that died there; it is removed, and the next run takes over."""
    now = time.time()
    slot, guard = tmp_path / "slot-0.json", tmp_path / ".slot-0.json.guard"
    slot.write_text(json.dumps({"host": "host-a", "action": "restart", "at": now - 7200}))
    guard.write_text("{}")
    fleet = tick.FleetSlots(tmp_path, 1, "host-b")
    assert fleet.claim("restart", now, 3600.0) == (False, ["host-a"])  # a live guard: wait
    assert guard.exists()
    os.utime(guard, (now - 7200, now - 7200))
    assert fleet.claim("restart", now, 3600.0) == (False, ["host-a"])
    assert not guard.exists()
    assert fleet.claim("restart", now, 3600.0) == (True, [])
    assert json.loads(slot.read_text())["host"] == "host-b"


def _claim(folder: str, host: str) -> bool:
    return bool(load().FleetSlots(Path(folder), 2, host).claim("restart", time.time(), 3600.0)[0])


def test_hosts_claiming_at_once_never_exceed_the_cap(tmp_path: Path) -> None:
    hosts = [f"host-{n}" for n in range(12)]
    with ProcessPoolExecutor(4) as pool:
        won = list(pool.map(_claim, [str(tmp_path)] * len(hosts), hosts))
    assert sum(won) == 2, won
    holders = sorted(json.loads(p.read_text())["host"] for p in tmp_path.glob("slot-*.json"))
    assert holders == sorted(h for h, w in zip(hosts, won, strict=True) if w)


@pytest.mark.parametrize(
    ("bad", "named"),
    [
        (["--fleet-max", "0"], "--fleet-max must be"),
        (["--max-restarts", "-1"], "--fleet-max must be"),
        # durations: argparse's float takes each of these (review of d0e98cd)
        (["--window", "0"], "--window: '0': give a number of seconds above 0"),
        (["--speed-timeout", "0"], "--speed-timeout: '0': give a number of seconds above 0"),
        (["--speed-timeout", "nan"], "--speed-timeout: 'nan': give a number"),
        (["--timeout", "-5"], "--timeout: '-5': give a number"),
        (["--timeout", "inf"], "--timeout: 'inf': give a number"),
        (["--window", "soon"], "--window: 'soon' is not a number of seconds"),
    ],
)
def test_a_bad_limit_is_a_usage_error(tmp_path: Path, bad: list[str], named: str) -> None:
    code, said, calls = run_tick(tmp_path, "host-a", False, "--fleet-slots", str(tmp_path), *bad)
    assert code == 2 and calls == [] and named in said, said
    assert not (tmp_path / "host-a" / "gate.json").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["host-a"]


@pytest.mark.parametrize(
    ("said", "used"),
    [
        ("1.953GiB / 23.47GiB", 1.953 * 2**30),  # Docker's binary units
        ("512.3MiB / 1GiB", 512.3 * 2**20),
        ("731.2MB / 16.5GB", 731.2e6),  # podman's decimal ones
        ("512kB / 1GB", 512e3),
        ("0B / 23.47GiB", 0.0),
        ("0B / 0B", None),  # Docker 20.10's figure for a sample it had not taken
        ("1GiB / --", None),
        ("-- / --", None),  # a stopped container
        ("1.5 XB / 2GiB", None),
        ("1.5GiB", None),
        ("", None),  # the host read nothing
    ],
)
def test_the_engines_memory_figure_is_read_with_the_size_grammar(
    said: str, used: float | None
) -> None:
    from sglx_runtime.gate_tick import memory_used

    assert memory_used(said) == (None if used is None else pytest.approx(used))


def test_a_memory_bound_passes_the_engines_figure_into_the_container(tmp_path: Path) -> None:
    """`--memory-max-bytes`: the host reads `docker stats` and hands what the engine printed and
    the bound to the container's checks; without it, no stats are read and no memory check
    runs."""
    code, said, _ = run_tick(tmp_path, "host-a", True, "--memory-max-bytes", str(2**30))
    assert code == 0, said
    argv = (tmp_path / "host-a" / "exec.argv").read_text()
    assert f"--memory-usage=1.5GiB / 23.47GiB --memory-max-bytes={2**30}" in argv, argv
    run_tick(tmp_path, "host-b", True)
    assert "--memory-usage" not in (tmp_path / "host-b" / "exec.argv").read_text()


def test_a_figure_the_engine_had_not_sampled_is_asked_again(tmp_path: Path) -> None:
    """CI-I: Docker 20.10 printed "0B / 0B" for the running server, and a 1 MiB bound passed.
    No limit is 0: the host asks again, a second apart, three times in all, and hands on the
    first real figure; three such answers reach the container, which reads them as unread."""
    unsampled = "0B / 0B"
    code, said, _ = run_tick(tmp_path, "host-a", True, "--memory-max-bytes", str(2**30),
                             stats=[unsampled, "1.5GiB / 23.47GiB"])  # fmt: skip
    assert code == 0, said
    assert "--memory-usage=1.5GiB / 23.47GiB " in exec_argv(tmp_path, "host-a")
    assert len((tmp_path / "host-a" / "stats.calls").read_text().splitlines()) == 2
    run_tick(tmp_path, "host-b", True, "--memory-max-bytes", str(2**30), stats=[unsampled])
    assert f"--memory-usage={unsampled} " in exec_argv(tmp_path, "host-b")
    assert len((tmp_path / "host-b" / "stats.calls").read_text().splitlines()) == 3


def test_the_container_fails_memory_above_its_bound_and_renders_the_figure() -> None:
    """sglx_runtime.gate_tick's memory check: above the bound it fails (the remediation
    policy then acts), under it passes; an unread figure passes and says so; the figure is
    a series of its own."""
    from prometheus_client.parser import text_string_to_metric_families

    from sglx_runtime import gate_tick

    above = gate_tick.memory(3 * 2**30, 2 * 2**30)
    assert not above.passed and "3.00 GiB, bound 2.00 GiB: above it" in above.message
    assert gate_tick.memory(2**30, 2 * 2**30).passed
    unread = gate_tick.memory(-1, 2 * 2**30)
    assert unread.passed and "not measured" in unread.message
    text = gate_tick.textfile([above], 1.8e9, 900, 3 * 2**30)
    series = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    assert series["sglx_server_memory_bytes"] == 3 * 2**30
    assert "sglx_server_memory_bytes" not in gate_tick.textfile([above], 1.8e9, 900, -1)


# --- the speed check on the timer: due every --speed-every s, alert only -------------------


def speed_answer(passed: bool) -> dict[str, Any]:
    """The container's answer to a run with --speed: the cheap checks passed, speed as asked."""
    said = answer(True)
    message = "212.0 output tok/s" if passed else "below the floor 900 (measured twice: 1, 2)"
    said["record"]["checks"]["speed"] = {"passed": passed, "message": message}
    said["record"]["passed"] = passed
    said["speed_textfile"] = f"sglx_gate_speed_passed {float(passed)}\n"
    return said


def exec_argv(tmp: Path, host: str) -> str:
    return (tmp / host / "exec.argv").read_text()


def test_speed_runs_when_due_counting_from_the_rollouts_measurement(tmp_path: Path) -> None:
    """--speed-every: the first run after a long-ago measurement benchmarks, with the site's
    floors; a record that measured within the period does not, whether the timer's (speed_at)
    or the rollout's (its speed record's measured_at, so a fresh rollout is not benchmarked
    again at once); without --speed-every nothing is timed."""
    every = ["--speed-every", "3600", "--speed-floors", '{"min_output_tok_s": 900}']
    rollout = tmp_path / "gate-speed.json"
    rollout.write_text(json.dumps({"measured_at": "2026-01-01T00:00:00+00:00"}))
    code, said, _ = run_tick(tmp_path, "host-a", True, *every, "--speed-record", str(rollout),
                             answered=speed_answer(True))  # fmt: skip
    assert code == 0, said
    argv = exec_argv(tmp_path, "host-a")
    assert '--speed --speed-floors={"min_output_tok_s": 900} --speed-slos={}' in argv, argv
    assert "host-a: speed passed: 212.0 output tok/s" in said, said
    record = json.loads((tmp_path / "host-a" / "gate.json").read_text())
    assert time.time() - record["speed_at"] < 60, record
    speed_file = tmp_path / "host-a" / "sglx_gate_speed.prom"
    assert speed_file.read_text() == "sglx_gate_speed_passed 1.0\n"
    # measured just now, by this timer: the next run within the period does not benchmark
    speed_file.unlink()
    code, said, _ = run_tick(tmp_path, "host-a", True, *every)
    assert code == 0 and "--speed" not in exec_argv(tmp_path, "host-a"), said
    assert not speed_file.exists()  # its series stay as the last measuring run wrote them
    again = json.loads((tmp_path / "host-a" / "gate.json").read_text())
    assert again["speed_at"] == record["speed_at"]  # carried from the run that measured
    # a rollout that measured a minute ago counts as the last measurement
    rollout.write_text(json.dumps({"measured_at": datetime.now(UTC).isoformat()}))
    run_tick(tmp_path, "host-b", True, *every, "--speed-record", str(rollout))
    assert "--speed" not in exec_argv(tmp_path, "host-b")
    run_tick(tmp_path, "host-c", True)
    assert "--speed" not in exec_argv(tmp_path, "host-c")


def test_a_run_failing_on_speed_alone_only_alerts(tmp_path: Path) -> None:
    """Slow is named (the record, the journal, the series), never restarted or stopped: a
    restart does not make a host faster, and the policy acts on the other checks only."""
    for policy in ("restart", "stop"):
        code, said, calls = run_tick(tmp_path, f"host-{policy}", False, "--speed-every", "60",
                                     "--remediation", policy,
                                     answered=speed_answer(False))  # fmt: skip
        assert code == 1, said
        assert "speed FAILED: below the floor 900 (measured twice: 1, 2)" in said, said
        assert f"remediation ({policy}): alert (speed: no restart)" in said, said
        assert calls == []
    # numerics failing beside it: the policy acts
    both = speed_answer(False)
    both["record"]["checks"]["numerics"] = {"passed": False, "message": "drift"}
    code, said, calls = run_tick(tmp_path, "host-both", False, "--speed-every", "60",
                                 "--remediation", "restart", answered=both)  # fmt: skip
    assert code == 1 and calls == ["restart sglx-server.service"], (said, calls)


@given(value=st.one_of(JSON, st.text(max_size=40)))
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_any_speed_record_or_timer_record_decides_without_a_traceback(
    value: Any, tmp_path: Path
) -> None:
    """A hand-edited rollout record or timer record (any JSON, any measured_at or speed_at)
    gives a time or None, and the due decision never raises."""
    rollout, record = tmp_path / "speed.json", tmp_path / "gate.json"
    for measured in (value, {"measured_at": value}):
        rollout.write_text(json.dumps(measured))
        record.write_text(json.dumps({"speed_at": value} if not isinstance(value, dict) else value))
        args = tick.argparse.Namespace(speed_every=3600, speed_record=rollout, record=record)
        last = tick.last_speed(args, tick.read_json(record))
        assert last is None or isinstance(last, float)
        assert tick.speed_due(args, tick.read_json(record), time.time()) in (True, False)


def test_the_containers_speed_series_have_a_textfile_of_their_own() -> None:
    """sglx_runtime.gate_tick: the speed check's verdict, when it ran and what it measured;
    a check that could not measure leaves the throughput out."""
    from prometheus_client.parser import text_string_to_metric_families

    from sglx_runtime import gate_tick

    passed = gate_tick.Verdict("speed", True, "212.0 output tok/s", 9.5)
    text = gate_tick.speed_textfile(passed, 1.8e9, 212.0)
    series = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    assert series == {
        "sglx_gate_speed_passed": 1.0,
        "sglx_gate_speed_last_run_timestamp_seconds": 1.8e9,
        "sglx_gate_speed_output_tokens_per_second": 212.0,
    }
    failed = gate_tick.Verdict("speed", False, "not run: the server is not healthy", 0.0)
    text = gate_tick.speed_textfile(failed, 1.8e9, None)
    assert "sglx_gate_speed_passed 0.0" in text
    assert "output_tokens" not in text


def test_a_device_fault_is_not_restarted_but_a_stop_policy_takes_the_host_out(
    tmp_path: Path,
) -> None:
    """The container's devices check (ECC, a device missing): a restart does not repair a
    device, so `restart` only alerts; `stop` takes the host out of service."""
    faulty = answer(True)
    faulty["record"]["checks"]["devices"] = {"passed": False, "message": "GPU 3: 2 uncorrectable"}
    faulty["record"]["passed"] = False
    code, said, calls = run_tick(tmp_path, "host-r", False, "--remediation", "restart",
                                 answered=faulty)  # fmt: skip
    assert code == 1 and calls == [], (said, calls)
    assert "devices FAILED: GPU 3: 2 uncorrectable" in said
    assert "remediation (restart): alert (devices: no restart)" in said, said
    code, said, calls = run_tick(tmp_path, "host-s", False, "--remediation", "stop",
                                 answered=faulty)  # fmt: skip
    assert code == 1 and calls == ["stop sglx-server.service"], (said, calls)


def test_a_check_the_container_could_not_run_is_named(tmp_path: Path) -> None:
    said_by = answer(True)
    said_by["record"]["not_run"] = {"devices": "amd-smi is not in the server's container: not run"}
    code, said, _ = run_tick(tmp_path, "host-a", True, answered=said_by)
    assert code == 0, said
    assert "host-a: devices not run: amd-smi is not in the server's container: not run" in said


def test_a_container_of_an_image_made_before_the_runtime_split_is_still_judged(
    tmp_path: Path,
) -> None:
    """A rollback may bring back an image whose gate module is still sglx_platform.gate_tick
    (made before sglx-runtime was split from the plugin): python's refusal of the runtime's
    module sends the same checks to the earlier one, and the run is judged as any other."""
    docker, *_ = stand_ins(tmp_path / "host-a", True)
    real = docker.read_text().replace("#!/bin/sh\n", "", 1)
    docker.write_text(
        '#!/bin/sh\ncase "$*" in *sglx_runtime.gate_tick*)\n'
        '  echo "/opt/sglx/venv/bin/python: Error while finding module specification for '
        "'sglx_runtime.gate_tick' (ModuleNotFoundError: No module named 'sglx_runtime')\" >&2\n"
        f"  exit 1;;\nesac\n{real}"
    )
    code, said, _ = run_tick_with(tmp_path, "host-a", docker)
    assert code == 0, said
    assert "exec c python -m sglx_platform.gate_tick --url" in exec_argv(tmp_path, "host-a")
    assert "host-a: numerics passed" in said, said


def test_a_failing_gate_module_is_not_retried_under_another_name(tmp_path: Path) -> None:
    """Only python's own 'No module named sglx_runtime' sends the checks to the earlier module:
    a run that fails otherwise is judged as it failed."""
    code, said, _ = run_tick(tmp_path, "host-a", False)
    assert code == 1, said
    assert "python -m sglx_runtime.gate_tick --url" in exec_argv(tmp_path, "host-a")
