"""The sglang_service role's module sglx_health (library/sglx_health.py), run by the real
ansible-playbook against HTTP servers on 127.0.0.1 that answer as an SGLang server starting up
does: /health 503 a few times, then 200; /v1/models, then a one-token completion. One
playbook run holds every case (each task's result registered and written out as JSON), so the
test costs one Ansible start.

What it pins: a server that turns healthy passes, with the model and the completion in the
result; one that never does fails after the timeout naming the URL and the unit; a healthy
server whose completion cannot be read fails naming the completion; `completion: false` asks
for none. The early failure of a unit systemd keeps restarting is the e2e's (a real unit whose
server crashes on start, in test_a_failed_upgrade_is_rolled_back)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from helpers.ansible_play import ANSIBLE, ansible_playbook

MODULE_PATH = ANSIBLE / "roles" / "sglang_service" / "library"
UNIT = "sglx-test-no-such-unit.service"  # no systemd here: the module reads 0 restarts


class Server:
    """An HTTP server on a free port of 127.0.0.1 whose /health answers 503 `unhealthy` times
    (None = always) before 200, and whose completion answers `completion` (a body)."""

    def __init__(self, unhealthy: int | None, completion: bytes) -> None:
        self.requests: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                owner.requests.append(f"GET {self.path}")
                if self.path == "/health":
                    asked = owner.requests.count("GET /health")
                    ready = unhealthy is not None and asked > unhealthy
                    self._answer(200 if ready else 503, b"")
                elif self.path == "/v1/models":
                    self._answer(200, json.dumps({"data": [{"id": "demo"}]}).encode())
                else:
                    self._answer(404, b"{}")

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                owner.requests.append(f"POST {self.path} {self.rfile.read(length).decode()}")
                self._answer(200, completion)

            def log_message(self, *args: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


GOOD = json.dumps({"choices": [{"text": " world"}]}).encode()


@pytest.fixture
def servers() -> Iterator[dict[str, Server]]:
    made = {
        "turns_healthy": Server(unhealthy=2, completion=GOOD),
        "never_healthy": Server(unhealthy=None, completion=GOOD),
        "bad_completion": Server(unhealthy=0, completion=b"<html>busy</html>"),
        "no_completion": Server(unhealthy=0, completion=GOOD),
    }
    yield made
    for server in made.values():
        server.close()


def test_the_gate_passes_a_server_that_turns_healthy_and_names_each_failure(
    tmp_path: Path, servers: dict[str, Server]
) -> None:
    out = tmp_path / "results.json"
    cases = {
        "turns_healthy": {"timeout": 60},
        "never_healthy": {"timeout": 3},
        "bad_completion": {"timeout": 60},
        "no_completion": {"timeout": 60, "completion": False},
    }
    tasks: list[dict[str, Any]] = [
        {
            "name": case,
            "sglx_health": {"url": servers[case].url + "/", "unit": UNIT, **args},
            "register": case,
            "ignore_errors": True,
        }
        for case, args in cases.items()
    ]
    tasks.append(
        {
            "name": "Write the results",
            "ansible.builtin.copy": {
                "content": "{{ {" + ", ".join(f"'{c}': {c}" for c in cases) + "} | to_json }}",
                "dest": str(out),
                "mode": "0600",
            },
        }
    )
    plays = [{"hosts": "all", "gather_facts": False, "tasks": tasks}]
    done = ansible_playbook(
        tmp_path, plays, {"node": {"ansible_connection": "local"}}, "-M", str(MODULE_PATH)
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr
    results = json.loads(out.read_text())

    healthy = results["turns_healthy"]
    assert not healthy.get("failed") and healthy["changed"] is False, healthy
    assert (healthy["model"], healthy["completion"]) == ("demo", " world")
    assert healthy["seconds"] >= 2  # a poll a second
    seen = servers["turns_healthy"].requests
    assert seen.count("GET /health") == 3 and "GET /v1/models" in seen
    (posted,) = [r for r in seen if r.startswith("POST /v1/completions ")]
    body = json.loads(posted.split(" ", 2)[2])
    assert body == {"model": "demo", "prompt": "Hello", "max_tokens": 1, "temperature": 0}

    never = results["never_healthy"]
    assert never["failed"], never
    url = servers["never_healthy"].url
    assert never["msg"].startswith(f"{url}/health did not answer 200 within 3 s"), never["msg"]
    assert f"journalctl -u {UNIT}" in never["msg"]
    assert not any(r.startswith("POST") for r in servers["never_healthy"].requests)

    bad = results["bad_completion"]
    assert bad["failed"], bad
    assert "is healthy but a one-token completion failed" in bad["msg"], bad["msg"]

    none = results["no_completion"]
    assert not none.get("failed") and "completion" not in none, none
    assert not any(r.startswith("POST") for r in servers["no_completion"].requests)
