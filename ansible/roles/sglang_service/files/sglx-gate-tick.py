#!/usr/bin/python3
"""The host's side of the serving gate on a timer (sglx-gate.service, started by
sglx-gate.timer; role sglang_service, `sglang_service_gate_timer`).

It runs the cheap checks inside the server's container (`python -m sglx_platform.gate_tick`:
health and the golden-numerics replay, where the image's golden file and tolerances are), then:
- writes their Prometheus series for the node exporter's textfile collector
  (`--textfile DIR/sglx_gate.prom`), atomically, so the collector never reads half a file;
- writes the run as a JSON record beside the install records (`--record FILE`), with the
  remediation actions of the last `--window` seconds;
- on a failed run, does what the inventory says (`--remediation`): `alert` (nothing more: the
  series and the journal say it), `restart` (restart the server's unit, at most
  `--max-restarts` times per window, then only alert), or `stop` (stop the unit until an
  operator acts). Every action is logged to the journal with the result that caused it.

A run that cannot judge (no container, no answer) writes its record but leaves the textfile as
it was: its `sglx_gate_last_run_timestamp_seconds` then ages, and the SglxGateStale alert says
the gate stopped running. Standard library only: hosts have the Python Ansible runs with.
Exit 0 passed, 1 failed, 2 could not judge.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MAX_OUTPUT_BYTES = 1 << 20
FORMAT = "sglx-gate-record"
VERSION = 1
ACTIONS = ("alert", "restart", "stop")


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


def run_checks(args: argparse.Namespace) -> tuple[int, dict[str, Any] | None, str]:
    """The container's verdict: (exit code, its JSON or None, what went wrong)."""
    argv = [args.docker, "exec", args.container, "python", "-m", "sglx_platform.gate_tick",
            "--url", args.url, "--host", args.host, "--interval", str(args.interval)]  # fmt: skip
    try:
        done = subprocess.run(argv, capture_output=True, timeout=args.timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 2, None, f"{' '.join(argv[:3])}: {exc}"
    said = done.stderr[-2000:].decode(errors="replace").strip()
    if done.returncode not in (0, 1) or len(done.stdout) > MAX_OUTPUT_BYTES:
        return 2, None, said or f"exit {done.returncode}"
    try:
        out = json.loads(done.stdout)
        record, text = out["record"], out["textfile"]
        if not isinstance(record, dict) or not isinstance(text, str):
            raise TypeError("record or textfile of the wrong type")
    except (ValueError, KeyError, TypeError) as exc:
        return 2, None, f"the container's answer is not the gate's JSON: {exc}"
    return done.returncode, out, ""


def previous_actions(path: Path, now: float, window: float) -> list[dict[str, Any]]:
    """The remediation actions the last record lists within the window (the rate limit's
    memory); a record that cannot be read counts as none."""
    try:
        record = json.loads(path.read_text())
        actions = record.get("actions", [])
    except (OSError, ValueError, AttributeError):
        return []
    if not isinstance(actions, list):
        return []
    return [a for a in actions if isinstance(a, dict)
            and isinstance(a.get("at"), (int, float)) and now - a["at"] < window]  # fmt: skip


def remediate(args: argparse.Namespace, actions: list[dict[str, Any]], why: str) -> str:
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
    done = subprocess.run(["systemctl", verb, args.unit], capture_output=True, check=False)
    if done.returncode != 0:
        return f"{verb} failed: {done.stderr.decode(errors='replace').strip()[-300:]}"
    actions.append({"action": verb, "at": round(time.time(), 3), "why": why[:500]})
    return verb


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
    parser.add_argument("--window", type=float, default=3600.0, help="rate-limit window, s")
    parser.add_argument("--interval", type=int, default=900, help="the timer's period, s")
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args(argv)

    code, out, problem = run_checks(args)
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
        checks = record.get("checks", {})
        for name, check in sorted(checks.items()):
            verdict = "passed" if check.get("passed") else "FAILED"
            say(f"{args.host}: {name} {verdict}: {check.get('message')}")
    if code != 0:
        why = problem or "; ".join(
            f"{n}: {c.get('message')}" for n, c in sorted(record.get("checks", {}).items())
            if not c.get("passed")
        )  # fmt: skip
        done = remediate(args, actions, why)
        record["remediation"] = done
        say(f"{args.host}: remediation ({args.remediation}): {done}")
    record["actions"] = actions
    write_atomically(args.record, json.dumps(record, indent=1, sort_keys=True) + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
