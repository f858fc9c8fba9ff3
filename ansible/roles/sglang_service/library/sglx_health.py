#!/usr/bin/python
"""Ansible module: wait until an SGLang server answers /health and one-token completion.

It also watches the systemd unit that runs the server, so a server that crashes on start (a
broken model, a missing device) fails the gate as soon as systemd has restarted it
`max_restarts` times, instead of after the whole timeout.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglx_health
short_description: Health gate of an sglx SGLang server
description:
  - Polls GET /health until it answers 200, then sends a one-token completion to /v1/completions.
  - Fails early when the systemd unit was restarted more than max_restarts times.
options:
  url:
    description: Base URL of the server, e.g. http://127.0.0.1:30000.
    type: str
    required: true
  unit:
    description: systemd unit that runs the server (for restarts and the journal).
    type: str
    required: true
  timeout:
    description: Seconds to wait for a healthy server.
    type: int
    default: 600
  max_restarts:
    description: Restarts of the unit after which the gate fails at once.
    type: int
    default: 1
  completion:
    description: Also require a one-token completion.
    type: bool
    default: true
author: sglx
"""

import json
import subprocess
import time
import urllib.error
import urllib.request

from ansible.module_utils.basic import AnsibleModule


def _get(url, body=None, timeout=10):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.status, response.read().decode()


def _unit(unit):
    out = subprocess.run(
        ["systemctl", "show", unit, "-p", "NRestarts", "-p", "ActiveState"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return int(props.get("NRestarts") or 0), props.get("ActiveState", "unknown")


def _journal(unit):
    return subprocess.run(
        ["journalctl", "-u", unit, "-n", "30", "--no-pager", "-o", "cat"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout


def main():
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "unit": {"type": "str", "required": True},
            "timeout": {"type": "int", "default": 600},
            "max_restarts": {"type": "int", "default": 1},
            "completion": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    url, unit = module.params["url"].rstrip("/"), module.params["unit"]
    started = time.monotonic()
    restarts0, _ = _unit(unit)
    while True:
        waited = time.monotonic() - started
        try:
            status, _ = _get(url + "/health", timeout=5)
            if status == 200:
                break
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
        restarts, state = _unit(unit)
        if restarts - restarts0 > module.params["max_restarts"]:
            module.fail_json(
                msg=f"{unit} restarted {restarts - restarts0} times before {url}/health answered "
                f"(state {state}): the server crashes on start; see journalctl -u {unit}",
                journal=_journal(unit),
            )
        if waited > module.params["timeout"]:
            module.fail_json(
                msg=f"{url}/health did not answer 200 within {module.params['timeout']} s "
                f"({unit} is {state}); see journalctl -u {unit}",
                journal=_journal(unit),
            )
        # A refused connection returns at once and `systemctl show` is cheap: polling each
        # second finds a ready server (or a crash) half a poll sooner on average.
        time.sleep(1)
    result = {"changed": False, "seconds": round(time.monotonic() - started, 1)}
    if module.params["completion"]:
        try:
            _, listing = _get(url + "/v1/models")
            model = json.loads(listing)["data"][0]["id"]
            status, body = _get(
                url + "/v1/completions",
                {"model": model, "prompt": "Hello", "max_tokens": 1, "temperature": 0},
                timeout=120,
            )
            text = json.loads(body)["choices"][0]["text"]
        except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError) as exc:
            module.fail_json(
                msg=f"{url} is healthy but a one-token completion failed: {exc}",
                journal=_journal(unit),
            )
        result.update(model=model, completion=text)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
