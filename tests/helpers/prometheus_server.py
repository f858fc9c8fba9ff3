"""A real Prometheus (Debian's package) on 127.0.0.1, as a site runs it beside its fleet: its
prometheus.yml lists the files the role sglx_prometheus wrote (the job `sglx` and its targets,
sglx's rules), with a short scrape and evaluation interval for a test. Queried through its HTTP
API; stopped, and its storage removed, when the `with` block ends."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from helpers.engine_fixtures import free_port

INTERVAL = "1s"


@dataclass
class Prometheus:
    url: str
    log: Path

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query's result vector (each sample's `metric` labels and `value`)."""
        body = self._get("/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        assert body["data"]["resultType"] == "vector", body
        return list(body["data"]["result"])

    def alerts(self) -> list[dict[str, Any]]:
        """The alerts pending or firing now (`labels`, `state`, `activeAt`)."""
        return list(self._get("/api/v1/alerts")["data"]["alerts"])

    def wait_for(self, what: str, found: Any, timeout: float = 60) -> float:
        """Seconds until `found()` is true; fails naming `what` and the server's log tail."""
        started = time.monotonic()
        while not found():
            if time.monotonic() - started > timeout:
                tail = self.log.read_text(errors="replace")[-3000:]
                raise AssertionError(f"Prometheus: no {what} within {timeout} s; its log: {tail}")
            time.sleep(0.5)
        return time.monotonic() - started

    def _get(self, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(self.url + path, timeout=10) as response:  # 127.0.0.1 only
            body: dict[str, Any] = json.loads(response.read())
        assert body["status"] == "success", body
        return body


@contextmanager
def prometheus(folder: Path, scrape_file: Path, rules_file: Path) -> Iterator[Prometheus]:
    """Prometheus scraping the job in `scrape_file` (pasted into scrape_configs, as a site on
    Debian bookworm's 2.42 does) and evaluating `rules_file`, every INTERVAL."""
    binary = shutil.which("prometheus")
    assert binary, "prometheus is missing: `make setup` installs Debian's prometheus package"
    folder.mkdir(parents=True)
    jobs = yaml.safe_load(scrape_file.read_text())
    for job in jobs:
        job["scrape_interval"] = job["scrape_timeout"] = INTERVAL
    config = {
        "global": {"scrape_interval": INTERVAL, "evaluation_interval": INTERVAL},
        "rule_files": [str(rules_file)],
        "scrape_configs": jobs,
    }
    (folder / "prometheus.yml").write_text(yaml.safe_dump(config))
    address = f"127.0.0.1:{free_port()}"
    log = folder / "prometheus.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [binary, f"--config.file={folder / 'prometheus.yml'}",
             f"--storage.tsdb.path={folder / 'data'}", f"--web.listen-address={address}"],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    server = Prometheus(f"http://{address}", log)
    try:
        server.wait_for("answer on /-/ready", lambda: _ready(server.url), timeout=60)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(folder / "data", ignore_errors=True)


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/-/ready", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False
