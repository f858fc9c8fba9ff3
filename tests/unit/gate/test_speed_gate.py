"""The speed gate on one host (sglx_runtime.speed_gate) and the records hosts keep
(sglx_core.gate.speed_record): records are untrusted (they cross hosts), a server already
measured since it started is judged again without a second run, and a slow host is named.
The benchmark itself runs against a real server in tests/integration/test_image_cpu.py."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from helpers.speed_records import STARTED, record_text, sample_line, sample_profile

from sglx_core.errors import SglxError
from sglx_core.gate.speed_record import (
    MAX_RECORD_BYTES,
    RECORD_VERSION,
    SpeedRecord,
    fleet_key,
    floors_of,
    parse_record,
    settings_of,
)
from sglx_core.profile import load_profile
from sglx_core.report import Result
from sglx_runtime import speed_gate

_profile = sample_profile
_line = sample_line
_record = record_text


def _gate(peers: dict[str, str]) -> Result:
    return speed_gate.gate(
        url="http://127.0.0.1:1",  # never asked: every record here measured its server
        host="host-b",
        fleet="f",
        peers=json.dumps(peers).encode(),
        fraction=0.7,
        site_floors={},
        timeout=1,
        started_at=STARTED,
        profile=_profile(),
    )


def test_a_record_reads_back_and_its_numbers_are_checked_against_the_profile() -> None:
    record = parse_record("host-a", _record("host-a", tok_s=123.5))
    assert record.fleet == "f"
    assert record.result(settings_of(_profile())).output_tok_s == 123.5
    # Another profile's benchmark (the cpu profile's own lengths): not comparable, named.
    with pytest.raises(SglxError, match=r"host-a:gate-speed\.json.*max_concurrency"):
        record.result(settings_of(load_profile("cpu")))


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("[]", "not a JSON object"),
        (json.dumps({"version": RECORD_VERSION, "host": "host-a", "fleet": "f"}), "'measured_at'"),
        (json.dumps({**json.loads(_record("host-a")), "version": 9}), "version is 9"),
        (json.dumps({**json.loads(_record("host-a")), "host": "host-c"}), "'host' is 'host-c'"),
        ("{not json", "speed record"),
        ("x" * (MAX_RECORD_BYTES + 1), "larger than"),
    ],
)
def test_a_malformed_record_is_an_error_naming_the_host_and_the_field(
    text: str, field: str
) -> None:
    with pytest.raises(SglxError, match=field) as caught:
        parse_record("host-a", text)
    assert "host-a:gate-speed.json" in caught.value.message
    assert "gate-speed.json on that host" in (caught.value.hint or "")


def test_site_floors_override_the_profiles_and_an_unknown_one_is_refused() -> None:
    floors = floors_of(_profile(), {"min_output_tok_s": 900})
    assert floors.min_output_tok_s == 900 and floors.max_tpot_mean_ms is None
    with pytest.raises(SglxError, match="min_tok_s is no speed floor"):
        floors_of(_profile(), {"min_tok_s": 900})


def test_dockers_start_time_is_read_to_the_microsecond() -> None:
    when = speed_gate.parse_started_at("2026-12-04T16:02:46.655212551Z")
    assert when == datetime(2026, 12, 4, 16, 2, 46, 655212, tzinfo=UTC)
    with pytest.raises(SglxError, match="not an RFC 3339 time"):
        speed_gate.parse_started_at("yesterday")


def test_a_server_measured_since_it_started_is_judged_again_not_measured_again() -> None:
    result = _gate(
        {"host-a": _record("host-a"), "host-b": _record("host-b"), "host-c": _record("host-c")}
    )
    assert result.exit_code == 0, result
    assert result.data["measured"] is False
    hosts = {h["host"]: h for h in result.data["report"]["hosts"]}
    assert hosts["host-b"]["ratio_to_median"] == pytest.approx(1.0)


def test_a_record_from_before_the_start_or_of_another_fleet_is_measured_anew() -> None:
    before = datetime(2026, 12, 4, 11, 0, tzinfo=UTC)
    stale = parse_record("host-b", _record("host-b", at=before))
    assert not speed_gate.since_start(stale, "f", STARTED)
    other = parse_record("host-b", _record("host-b", fleet="g"))
    assert not speed_gate.since_start(other, "f", STARTED)
    assert speed_gate.since_start(parse_record("host-b", _record("host-b")), "f", STARTED)
    assert not speed_gate.since_start(None, "f", STARTED)


def _measured(monkeypatch: pytest.MonkeyPatch, *tok_s: float) -> list[str]:
    """Stand in for bench_serving: the gate's runs measure `tok_s` in turn, the last one again
    after that (runs are counted)."""
    runs: list[str] = []

    def measure(settings: object, url: str, host: str, fleet: str, timeout: float) -> SpeedRecord:
        speed = tok_s[min(len(runs), len(tok_s) - 1)]
        runs.append(host)
        return parse_record(host, _record(host, fleet, tok_s=speed, at=datetime.now(UTC)))

    monkeypatch.setattr(speed_gate, "_measure", measure)
    return runs


def test_the_slow_host_is_named_against_its_fleet_and_other_fleets_are_left_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runs = _measured(monkeypatch, 40.0)  # slow again when measured again
    peers = {
        "host-a": _record("host-a", tok_s=200.0),
        "host-b": _record("host-b", tok_s=40.0),
        "host-c": _record("host-c", fleet="other", tok_s=1.0),  # another bundle: not compared
        "host-d": _record("host-d", tok_s=210.0),
    }
    result = _gate(peers)
    assert result.exit_code == 1
    (finding,) = result.findings
    assert finding.message == (
        "host-b: 40.0 output tok/s is 0.20 of the fleet median 200.0 (fraction 0.7): an outlier "
        "(measured twice: 40.0, then 40.0 output tok/s)"
    )
    hosts = [h["host"] for h in result.data["report"]["hosts"]]
    assert hosts == ["host-a", "host-b", "host-d"]
    # Its record failed beside the fleet, so the server was measured again, and once more to
    # confirm the outlier before it failed: both runs are in the result.
    assert runs == ["host-b", "host-b"] and result.data["measured"] is True
    assert "no longer passes beside its fleet: measured again" in result.lines[0]
    assert "measured again before it counts" in result.lines[1]
    assert result.lines[2] == (
        "host-b: measured twice: 40.0, then 40.0 output tok/s: slow twice, it fails"
    )
    assert len(result.data["measurements"]) == 2
    # An outlier is confirmed beside a peer before it counts: the one nearest the median.
    assert result.data["confirm_with"] == "host-a"
    assert (
        result.lines[3] == "host-b: an outlier: host-a, nearest the fleet median, is measured again"
    )


def _confirm(peers: dict[str, str]) -> Result:
    return speed_gate.confirm(
        host="host-b",
        peer="host-a",
        fleet="f",
        peers=json.dumps(peers).encode(),
        fraction=0.7,
        site_floors={},
        profile=_profile(),
    )


def test_an_outlier_beside_a_fleet_that_slowed_as_a_whole_passes_its_confirmation() -> None:
    """Issue 37: the peer nearest the median, measured again on its own host, is slow too (a
    busy switch, a scan on every host): the median was stale, not the host slow."""
    slowed = {
        "host-a": _record("host-a", tok_s=45.0),  # measured again: the fleet slowed
        "host-b": _record("host-b", tok_s=40.0),  # the suspect's last measurement
        "host-d": _record("host-d", tok_s=210.0),
    }
    result = _confirm(slowed)
    assert result.exit_code == 0, result
    assert result.data["measured"] is False
    assert result.lines == (
        "host-b: host-a measured again beside it: 45.0 output tok/s: passes: the fleet had slowed",
    )


def test_an_outlier_beside_a_peer_still_fast_fails_naming_both() -> None:
    held = {
        "host-a": _record("host-a", tok_s=200.0),
        "host-b": _record("host-b", tok_s=40.0),
        "host-d": _record("host-d", tok_s=210.0),
    }
    result = _confirm(held)
    assert result.exit_code == 1
    (finding,) = result.findings
    assert finding.message == (
        "host-b: 40.0 output tok/s is 0.20 of the fleet median 200.0 (fraction 0.7): an outlier "
        "(host-a measured again beside it: 200.0 output tok/s)"
    )


def test_a_confirmation_without_both_records_is_refused() -> None:
    with pytest.raises(SglxError, match="holds no record of host-a in this fleet"):
        _confirm({"host-b": _record("host-b", tok_s=40.0)})


def test_a_failure_below_a_floor_names_no_peer_to_confirm_with(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _measured(monkeypatch, 20.0)
    peers = {"host-a": _record("host-a", tok_s=21.0), "host-c": _record("host-c", tok_s=22.0)}
    result = speed_gate.gate(
        url="http://127.0.0.1:1", host="host-b", fleet="f", peers=json.dumps(peers).encode(),
        fraction=0.7, site_floors={"min_output_tok_s": 100}, timeout=1, started_at=STARTED,
        profile=_profile(),
    )  # fmt: skip
    assert result.exit_code == 1 and result.data["confirm_with"] is None


def test_a_host_slow_once_is_measured_again_and_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 37: a neighbour busy for a minute must not roll a healthy host back."""
    runs = _measured(monkeypatch, 30.0, 195.0)
    peers = {"host-a": _record("host-a", tok_s=200.0), "host-c": _record("host-c", tok_s=205.0)}
    result = _gate(peers)
    assert result.exit_code == 0, result
    assert runs == ["host-b", "host-b"]
    assert result.lines[-1] == "host-b: measured twice: 30.0, then 195.0 output tok/s: passes"
    first, second = result.data["measurements"]
    assert result.data["record"] == second  # the record kept is the run that passed
    assert '"output_throughput": 30.0' in first["line"]


def test_in_a_fleet_of_two_only_the_floors_judge(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = _measured(monkeypatch, 20.0)
    result = _gate({"host-a": _record("host-a", tok_s=200.0)})
    assert result.exit_code == 0, result
    assert runs == ["host-b"]
    (host_b,) = [h for h in result.data["report"]["hosts"] if h["host"] == "host-b"]
    (outlier,) = [c for c in host_b["checks"] if c["name"] == "outlier"]
    assert outlier["outcome"] == "skipped" and "judged by the floors only" in outlier["message"]


def test_a_record_taken_under_load_is_measured_again_and_the_new_run_decides(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runs = _measured(monkeypatch, 190.0)
    peers = {
        "host-a": _record("host-a", tok_s=200.0),
        "host-b": _record("host-b", tok_s=40.0),
        "host-c": _record("host-c", tok_s=200.0),
    }
    result = _gate(peers)
    assert result.exit_code == 0, result
    assert runs == ["host-b"]
    assert result.data["record"]["line"] != json.loads(peers["host-b"])["line"]  # the new run


def test_a_slow_peer_is_not_this_hosts_finding() -> None:
    peers = {
        "host-a": _record("host-a", tok_s=40.0),
        "host-b": _record("host-b", tok_s=200.0),
        "host-c": _record("host-c", tok_s=210.0),
    }
    result = _gate(peers)
    assert result.exit_code == 0, result


def test_peers_that_are_not_an_object_of_records_are_refused() -> None:
    with pytest.raises(SglxError, match="not a JSON object of host -> record text"):
        speed_gate.read_records(b"[]")
    with pytest.raises(SglxError, match=r"host-a:gate-speed\.json: the record is int"):
        speed_gate.read_records(b'{"host-a": 3}')


def test_bad_arguments_exit_2_with_the_problem_named(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--url", "http://127.0.0.1:1", "--host", "h", "--fleet", "f", "--json"]
    assert speed_gate.main([*argv, "--floors", "[1]"]) == 2
    said = json.loads(capsys.readouterr().out)
    assert said["errors"][0]["message"] == "--floors is not a JSON object"
    assert speed_gate.main([*argv, "--started-at", "soon"]) == 2
    said = json.loads(capsys.readouterr().out)
    assert "--started-at 'soon'" in said["errors"][0]["message"]


def test_the_fleet_key_is_the_running_image_and_arguments_less_each_groups_own() -> None:
    group = ["--tp", "2", "--nnodes", "2", "--node-rank", "0", "--random-seed", "17"]
    one = fleet_key("sha256:aa", [*group, "--dist-init-addr", "10.0.0.1:29500"])
    other = fleet_key("sha256:aa", [*group[:-1], "99", "--dist-init-addr=10.0.0.9:29500"])
    assert one == other  # two groups of one kind compare
    assert one.startswith("sha256:aa+args:")
    assert fleet_key("sha256:aa", ["--tp", "4"]) != fleet_key("sha256:aa", ["--tp", "2"])
    assert fleet_key("sha256:bb", []) != fleet_key("sha256:aa", [])


def test_the_fleet_comes_from_the_image_and_arguments_given(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--url", "http://127.0.0.1:1", "--host", "h", "--json", "--image", "sha256:aa"]
    assert speed_gate.main([*argv, "--server-args", '{"tp": 2}']) == 2
    said = json.loads(capsys.readouterr().out)
    assert said["errors"][0]["message"] == "--server-args is not a JSON list of strings"
    with pytest.raises(SystemExit) as stopped:
        speed_gate.main(argv)  # no --server-args, no --fleet
    assert stopped.value.code == 2
    assert "give --image and --server-args" in capsys.readouterr().err


def test_goodput_slos_come_from_the_profile_and_the_site_overrides_them() -> None:
    settings = settings_of(_profile())
    assert settings.goodput_slos_ms == {"ttft": 400.0, "tpot": 40.0}
    record = parse_record("host-a", _record("host-a"))
    assert record.result(settings).slo_attainment is not None  # goodput recorded and read
    site = settings_of(_profile(), {"tpot_ms": 150.0})
    assert site.goodput_slos_ms == {"ttft": 400.0, "tpot": 150.0}
    # A record taken against other SLOs is another benchmark: named, not compared.
    with pytest.raises(SglxError, match="goodput_slos_ms"):
        record.result(site)
    with pytest.raises(SglxError, match="ttft is no goodput SLO"):
        settings_of(_profile(), {"ttft": 1.0})


def test_a_peers_file_is_read_bounded_and_regular_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 37 item 11: /dev/zero read whole (MemoryError), a FIFO hung the gate."""
    fifo = tmp_path / "peers"
    os.mkfifo(fifo)
    argv = ["--url", "http://127.0.0.1:1", "--host", "h", "--fleet", "f", "--json"]
    for path, kind in ((fifo, "a FIFO"), (Path("/dev/zero"), "a character device")):
        assert speed_gate.main([*argv, "--peers", str(path)]) == 2
        said = json.loads(capsys.readouterr().out)
        assert f"the peers' records is {kind}, not a regular file" in said["errors"][0]["message"]


def test_the_gate_timers_speed_check_holds_the_floors_and_measures_a_failure_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """sglx_runtime.gate_tick.speed: the rollout's gate with no fleet beside it (floors only),
    its verdict and the output tok/s the last run measured."""
    from sglx_runtime import gate_tick

    monkeypatch.setattr(speed_gate, "baked_profile", _profile)
    monkeypatch.setattr(gate_tick, "baked_profile", _profile)
    floors = {"min_output_tok_s": 100}
    runs = _measured(monkeypatch, 200.0)
    verdict, tok_s = gate_tick.speed("http://127.0.0.1:1", "host-a", floors, {}, 1.0)
    assert (verdict.check, verdict.passed, tok_s, runs) == ("speed", True, 200.0, ["host-a"])
    assert verdict.message.startswith("200.0 output tok/s, within the floors"), verdict
    runs = _measured(monkeypatch, 20.0, 30.0)
    verdict, tok_s = gate_tick.speed("http://127.0.0.1:1", "host-a", floors, {}, 1.0)
    assert (verdict.passed, tok_s, len(runs)) == (False, 30.0, 2)
    assert "measured twice: 20.0, then 30.0 output tok/s" in verdict.message, verdict
