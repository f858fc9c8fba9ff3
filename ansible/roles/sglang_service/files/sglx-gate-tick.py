#!/usr/bin/python3
"""The host's side of the serving gate on a timer (sglx-gate.service, started by
sglx-gate.timer; role sglang_service, `sglang_service_gate_timer`).

It runs the cheap checks inside the server's container (`python -m sglx_runtime.gate_tick`:
health and the golden-numerics replay, where the image's golden file and tolerances are; with
`--memory-max-bytes`, the container's memory use the engine reports, read here first with
`docker stats`, under that bound: seed 000's fragmentation restart), then:
- writes their Prometheus series for the node exporter's textfile collector
  (`--textfile DIR/sglx_gate.prom`), atomically, so the collector never reads half a file;
- writes the run as a JSON record beside the install records (`--record FILE`), with the
  remediation actions of the last `--window` seconds;
- on a failed run, does what the inventory says (`--remediation`): `alert` (nothing more: the
  series and the journal say it), `restart` (restart the server's unit, at most
  `--max-restarts` times per window, then only alert), or `stop` (stop the unit until an
  operator acts). Every action is logged to the journal with the result that caused it.

Every `--speed-every` seconds it also runs the speed check (the rollout's benchmark against
the floors, `--speed-floors`, `--speed-slos`), counting from the last measurement: the timer's
own (the record's `speed_at`) or the rollout's (`--speed-record`, its `measured_at`), so a
fresh rollout is not benchmarked again at once. Its series go to `sglx_gate_speed.prom` beside
the textfile, rewritten only when it runs. A restart fixes neither a slow host nor a device
fault (the container's `devices` check: ECC, a device missing): a run that fails on those alone
only alerts, except that `stop` takes a host with a device fault out of service.

A fleet-wide cap (`--fleet-slots DIR --fleet-max K`): where the fleet's hosts share a folder
(the NFS their weights or homes come from), a restart or a stop first claims one of K slot files
there with an exclusive create, so at most K hosts of the fleet remediate at once; a host past
the cap only alerts. The claim is let go on the host's next passing run; a restart's claim also
lapses after the window (a host that died holding it), a stop's only when an operator removes
it or the host passes again.

A run that cannot judge (no container, no answer) writes its record but leaves the textfile as
it was: its `sglx_gate_last_run_timestamp_seconds` then ages, and the SglxGateStale alert says
the gate stopped running. Standard library only: hosts have the Python Ansible runs with.
Everything read (the container's answer, the last record, the slot files) is bounded and
checked for its shape: a hand-edited or torn file counts as nothing, never as a traceback.
Exit 0 passed, 1 failed, 2 could not judge.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

MAX_OUTPUT_BYTES = 1 << 20
MAX_RECORD_BYTES = 1 << 20
FORMAT = "sglx-gate-record"
VERSION = 1
ACTIONS = ("alert", "restart", "stop")
SPEED = "speed"
DEVICES = "devices"
SPEED_TEXTFILE = "sglx_gate_speed.prom"
# The container's checks: the runtime's module, and where images made before the platform and
# runtime packages were split (sglx-runtime) keep it, which a rollback may bring back.
GATE_MODULE = "sglx_runtime.gate_tick"
EARLIER_GATE_MODULE = "sglx_platform.gate_tick"


def say(line: str) -> None:
    """One journal line (systemd keeps the unit's stdout)."""
    print(f"sglx-gate: {line}", flush=True)


def write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        Path(tmp).chmod(0o644)
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def memory_usage(args: argparse.Namespace, tries: int = 3) -> str:
    """`docker stats`' "USED / LIMIT" for the container as the engine printed it (its first
    200 characters; "" where it gave none): the container's checks read the figure, with the
    one size grammar sglx has (sglx_core.sizes), and an unread one restarts nothing.
    Docker 20.10 prints "0B / 0B" for a running container now and then, a sample it had not
    taken (no limit is 0): that figure is asked again, a second apart, `tries` times in all.
    The container's `gate_tick.memory_used` judges a LIMIT of 0 the same way, and is the rule's
    home; this script runs with the host's Python, which has no sglx to import, so it restates
    the test only to know when to ask again (a last "0B / 0B" still reaches that judge)."""
    argv = [args.docker, "stats", "--no-stream", "--format", "{{.MemUsage}}", args.container]
    said = ""
    for attempt in range(tries):
        if attempt:
            time.sleep(1)
        try:
            done = subprocess.run(argv, capture_output=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return ""
        said = done.stdout[:200].decode(errors="replace").strip()
        if done.returncode != 0 or not said.isprintable():
            return ""
        if said.replace(" ", "").partition("/")[2] not in ("0B", "0"):
            break
    return said


def last_speed(args: argparse.Namespace, previous: Any) -> float | None:
    """When speed was last measured (Unix time): by the timer (the last record's `speed_at`)
    or by the rollout (its record's `measured_at`, ISO 8601); None where neither says."""
    times = []
    if isinstance(previous, dict) and isinstance(previous.get("speed_at"), (int, float)):
        times.append(float(previous["speed_at"]))
    rollout = read_json(args.speed_record) if args.speed_record else None
    if isinstance(rollout, dict) and isinstance(rollout.get("measured_at"), str):
        with contextlib.suppress(ValueError, OverflowError):
            times.append(datetime.fromisoformat(rollout["measured_at"][:40]).timestamp())
    return max(times, default=None)


def speed_due(args: argparse.Namespace, previous: Any, now: float) -> bool:
    if args.speed_every <= 0:
        return False
    last = last_speed(args, previous)
    return last is None or not 0 <= now - last < args.speed_every


def run_checks(
    args: argparse.Namespace, speed: bool = False
) -> tuple[int, dict[str, Any] | None, str]:
    """The container's verdict: (exit code, its JSON or None, what went wrong)."""
    argv = [args.docker, "exec", args.container, "python", "-m", GATE_MODULE,
            "--url", args.url, "--host", args.host, "--interval", str(args.interval)]  # fmt: skip
    timeout = args.timeout
    if speed:  # two benchmarks at most: a failing one is measured again
        argv += ["--speed", f"--speed-floors={args.speed_floors}",
                 f"--speed-slos={args.speed_slos}",
                 f"--speed-timeout={args.speed_timeout}"]  # fmt: skip
        timeout += 2 * args.speed_timeout
    if args.memory_max_bytes > 0:
        # one word with its value: a figure like "-- / --" is no option of its own
        argv += [f"--memory-usage={memory_usage(args)}",
                 f"--memory-max-bytes={args.memory_max_bytes}"]  # fmt: skip
    try:
        done = subprocess.run(argv, capture_output=True, timeout=timeout, check=False)
        if done.returncode == 1 and lacks_module(done.stderr, GATE_MODULE):
            argv[argv.index(GATE_MODULE)] = EARLIER_GATE_MODULE
            done = subprocess.run(argv, capture_output=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 2, None, f"{' '.join(argv[:3])}: {exc}"
    return parse_answer(done.returncode, done.stdout, done.stderr)


def lacks_module(stderr: bytes, module: str) -> bool:
    """python -m's own refusal of a module the image does not hold (its last line)."""
    said = stderr[-500:].decode(errors="replace").strip().splitlines()[-1:]
    package = module.split(".")[0]
    return bool(said) and "No module named" in said[0] and package in said[0]


def parse_answer(code: int, stdout: bytes, stderr: bytes) -> tuple[int, dict[str, Any] | None, str]:
    """The container's answer, checked for the gate's shape: a `record` whose `checks` map each
    check's name to an object, a `textfile` string and, where speed ran, a `speed_textfile`
    string; anything else could not judge."""
    said = stderr[-2000:].decode(errors="replace").strip()
    if code not in (0, 1) or len(stdout) > MAX_OUTPUT_BYTES:
        return 2, None, said or f"exit {code}"
    try:
        out = json.loads(stdout)
        record, text = out["record"], out["textfile"]
        if not isinstance(record, dict) or not isinstance(text, str):
            raise TypeError("record or textfile of the wrong type")
        if not isinstance(out.get("speed_textfile", ""), str):
            raise TypeError("speed_textfile of the wrong type")
        checks = record.get("checks")
        if not isinstance(checks, dict) or not all(
            isinstance(name, str) and isinstance(check, dict) for name, check in checks.items()
        ):
            raise TypeError("its checks are not an object of objects")
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        return 2, None, f"the container's answer is not the gate's JSON: {exc}"
    return code, out, ""


def read_json(path: Path) -> Any:
    """A small JSON file of this script's own, or None where it is missing, too large or torn."""
    try:
        with path.open("rb") as source:
            raw = source.read(MAX_RECORD_BYTES + 1)
        return None if len(raw) > MAX_RECORD_BYTES else json.loads(raw)
    except (OSError, ValueError, RecursionError):
        return None


def previous_actions(path: Path, now: float, window: float) -> list[dict[str, Any]]:
    """The remediation actions the last record lists within the window (the rate limit's
    memory): only well-formed ones (a known action and a numeric time); a record that cannot
    be read counts as none."""
    record = read_json(path)
    actions = record.get("actions", []) if isinstance(record, dict) else []
    if not isinstance(actions, list):
        return []
    return [a for a in actions if isinstance(a, dict) and a.get("action") in ACTIONS
            and isinstance(a.get("at"), (int, float)) and not isinstance(a["at"], bool)
            and 0 <= now - a["at"] < window]  # fmt: skip


@dataclass(frozen=True)
class FleetSlots:
    """K slot files in a folder the fleet's hosts share: a host remediates only while it
    holds one (an exclusive create, which NFS v3 and later keep atomic)."""

    folder: Path
    size: int
    host: str

    def claim(self, verb: str, now: float, window: float) -> tuple[bool, list[str]]:
        """(claimed, the hosts holding the others): a slot this host holds already is kept."""
        holders = []
        mine = {"host": self.host, "action": verb, "at": round(now, 3)}
        for path in self._paths():
            held = read_json(path)
            if isinstance(held, dict) and held.get("host") == self.host:
                return True, []
            if self._lapsed(held, now, window):
                self._remove_if(path, held, now, window)
            if self._create(path, mine):
                return True, []
            again = read_json(path)
            holders.append(str(again.get("host")) if isinstance(again, dict) else path.name)
        return False, holders

    def release(self, now: float, window: float) -> None:
        """Let go of the slot this host holds (its gate passed again)."""
        for path in self._paths():
            held = read_json(path)
            if isinstance(held, dict) and held.get("host") == self.host:
                self._remove_if(path, held, now, window)

    def _paths(self) -> list[Path]:
        return [self.folder / f"slot-{n}.json" for n in range(self.size)]

    @staticmethod
    def _lapsed(held: Any, now: float, window: float) -> bool:
        """A restart's claim older than the window; a torn or foreign file is not taken over
        (an operator removes it), nor is a stop's claim."""
        if not isinstance(held, dict) or held.get("action") != "restart":
            return False
        at = held.get("at")
        return isinstance(at, (int, float)) and now - at >= window

    @classmethod
    def _remove_if(cls, path: Path, judged: Any, now: float, window: float) -> None:
        """Remove the slot file if it still holds the claim judged, under the slot's guard
        file: every removal takes the guard and creates need no removal, so between reading
        the claim again and removing it no other host's claim can take its place (two hosts
        taking over one lapsed slot: the second finds the first's fresh claim and keeps it).
        A guard older than the window is a host's that died between the two steps; it is
        removed, and this run leaves the slot as it is."""
        guard = path.with_name(f".{path.name}.guard")
        if not cls._create(guard, {"at": round(now, 3), "pid": os.getpid()}):
            try:
                if now - guard.stat().st_mtime >= window:
                    guard.unlink()
            except OSError:
                pass
            return
        try:
            if read_json(path) == judged:
                path.unlink(missing_ok=True)
        finally:
            guard.unlink(missing_ok=True)

    @staticmethod
    def _create(path: Path, claim: dict[str, Any]) -> bool:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as out:
            out.write(json.dumps(claim) + "\n")
        return True


def remediate(
    args: argparse.Namespace, actions: list[dict[str, Any]], why: str, slots: FleetSlots | None
) -> str:
    """The policy's action on a failed run; what was done, for the record and the journal."""
    if args.remediation == "alert":
        return "alert"
    if args.remediation == "stop":
        if any(a["action"] == "stop" for a in actions):
            return "alert (stopped already; an operator starts it again)"
        verb = "stop"
    else:
        restarts = sum(1 for a in actions if a["action"] == "restart")
        if restarts >= args.max_restarts:
            return f"alert (restarted {restarts} times in {args.window:g} s already: rate limited)"
        verb = "restart"
    if slots is not None:
        try:
            claimed, holders = slots.claim(verb, time.time(), args.window)
        except OSError as exc:
            return f"alert (the fleet's slots in {slots.folder} cannot be claimed: {exc})"
        if not claimed:
            return (f"alert (the fleet's cap: {slots.size} hosts in remediation already: "
                    f"{', '.join(sorted(holders))})")  # fmt: skip
    done = subprocess.run([args.systemctl, verb, args.unit], capture_output=True, check=False)
    if done.returncode != 0:
        return f"{verb} failed: {done.stderr.decode(errors='replace').strip()[-300:]}"
    actions.append({"action": verb, "at": round(time.time(), 3), "why": why[:500]})
    return verb


def seconds(text: str) -> float:
    """A duration on the command line: a finite number above 0 (argparse's float takes nan,
    inf and 0, which would make a run that never times out, or one that never starts). The
    rule of sglx_core.arg_types.positive, restated: this script runs on a host without sglx."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of seconds above 0")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sglx-gate-tick", description=__doc__.split("\n")[0])
    parser.add_argument("--container", required=True)
    parser.add_argument("--url", required=True, help="the server as the container sees it")
    parser.add_argument("--host", required=True, help="the inventory name, for findings")
    parser.add_argument("--unit", required=True, help="the server's systemd unit")
    parser.add_argument("--docker", default="docker")
    parser.add_argument("--textfile", type=Path, required=True, help="the .prom file to write")
    parser.add_argument("--record", type=Path, required=True, help="the JSON record to write")
    parser.add_argument("--remediation", choices=ACTIONS, default="alert")
    parser.add_argument("--max-restarts", type=int, default=1)
    parser.add_argument("--window", type=seconds, default=3600.0, help="rate-limit window, s")
    parser.add_argument("--interval", type=int, default=900, help="the timer's period, s")
    parser.add_argument("--timeout", type=seconds, default=600.0)
    parser.add_argument("--systemctl", default="systemctl", help="what restarts and stops --unit")
    parser.add_argument("--fleet-slots", type=Path, help="a folder the fleet's hosts share")
    parser.add_argument("--fleet-max", type=int, default=1, help="hosts remediating at once")
    parser.add_argument("--memory-max-bytes", type=int, default=0, help="0: no memory check")
    parser.add_argument(
        "--speed-every", type=int, default=0, help="s between speed checks; 0: none"
    )
    parser.add_argument("--speed-floors", default="{}", help="the site's floors, a JSON object")
    parser.add_argument("--speed-slos", default="{}", help="the site's SLOs, a JSON object")
    parser.add_argument("--speed-record", type=Path, help="the rollout's speed record")
    parser.add_argument("--speed-timeout", type=seconds, default=300.0, help="per benchmark, s")
    args = parser.parse_args(argv)
    if (args.fleet_max < 1 or args.max_restarts < 0 or args.memory_max_bytes < 0
            or args.speed_every < 0):  # fmt: skip
        parser.error("--fleet-max must be 1 or more; --max-restarts, --memory-max-bytes and "
                     "--speed-every 0 or more")  # fmt: skip
    slots = FleetSlots(args.fleet_slots, args.fleet_max, args.host) if args.fleet_slots else None

    previous = read_json(args.record)
    speed = speed_due(args, previous, time.time())
    code, out, problem = run_checks(args, speed)
    now = time.time()
    actions = previous_actions(args.record, now, args.window)
    if out is None:
        record: dict[str, Any] = {"format": FORMAT, "version": VERSION, "passed": False,
                                  "finished_at": round(now, 3), "judged": False,
                                  "problem": problem}  # fmt: skip
        say(f"{args.host}: could not run the checks: {problem}")
    else:
        record = {**out["record"], "judged": True}
        write_atomically(args.textfile, out["textfile"])
        if out.get("speed_textfile"):
            write_atomically(args.textfile.with_name(SPEED_TEXTFILE), out["speed_textfile"])
        for name, check in sorted(record["checks"].items()):
            verdict = "passed" if check.get("passed") else "FAILED"
            say(f"{args.host}: {name} {verdict}: {check.get('message')}")
        not_run = record.get("not_run")
        for name, why in sorted(not_run.items() if isinstance(not_run, dict) else []):
            say(f"{args.host}: {name} not run: {str(why)[:300]}")
    # measured now (the server answered its health check), else when it last was
    checks = record.get("checks", {})
    measured = speed and out is not None and checks.get("health", {}).get("passed") is True
    last = round(now, 3) if measured else last_speed(args, previous)
    if isinstance(last, (int, float)):
        record["speed_at"] = last
    failed = {n for n, c in checks.items() if not c.get("passed")}
    if code != 0:
        why = problem or "; ".join(f"{n}: {checks[n].get('message')}" for n in sorted(failed))
        # a restart fixes neither a slow host nor a device fault; a stop takes a faulty one out
        acts = (
            out is None
            or failed - {SPEED, DEVICES}
            or (DEVICES in failed and args.remediation == "stop")
        )
        unfixed = " and ".join(sorted(failed))
        done = remediate(args, actions, why, slots) if acts else f"alert ({unfixed}: no restart)"
        record["remediation"] = done
        say(f"{args.host}: remediation ({args.remediation}): {done}")
    elif slots is not None:
        try:
            slots.release(time.time(), args.window)
        except OSError as exc:
            say(f"{args.host}: could not let go of its slot in {slots.folder}: {exc}")
    record["actions"] = actions
    write_atomically(args.record, json.dumps(record, indent=1, sort_keys=True) + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
