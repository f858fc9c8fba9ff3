"""`sglx ansible dashboard`: the Grafana dashboard of an sglx fleet, over the series the rules
watch (sglang's, sglx's, the rules' recordings), per host and per fleet.

Written to ansible/prometheus/sglx.dashboard.json (drift-checked with `--check` in `make lint`),
which a site imports into its Grafana (Dashboards, Import). Its variables are the labels the
scrape targets carry (role sglx_prometheus: `fleet`, `host`); the e2e evaluates every panel's
query in a real Prometheus scraping the test fleet, so none names a series nothing produces.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sglx.prometheus_rules import GATE_JOB, JOB, WINDOW
from sglx.rendered import print_write_or_check
from sglx_core.report import Result

DASHBOARD_FILE = Path("ansible/prometheus/sglx.dashboard.json")
UID = "sglx-fleet"
SELECTED = f'job="{JOB}", fleet=~"$fleet", host=~"$host"'  # the dashboard's choice of hosts
GATE_SELECTED = f'job="{GATE_JOB}", fleet=~"$fleet", host=~"$host"'  # their gate timers' series
RATE = "5m"
# Panels: (title, unit, [(query, legend)]). Each query names its series once; `SELECTED`
# narrows it to the hosts chosen at the top of the dashboard.
PANELS: list[tuple[str, str, list[tuple[str, str]]]] = [
    (
        "Servers answering their metrics route",
        "short",
        [(f'sum by (fleet) (up{{job="{JOB}", fleet=~"$fleet"}})', "{{fleet}}")],
    ),
    (
        "Output throughput (tokens/s)",
        "short",
        [
            (f"sglang:gen_throughput{{{SELECTED}}}", "{{host}}"),
            (f'fleet:sglang_gen_throughput:median{WINDOW}{{fleet=~"$fleet"}}', "{{fleet}} median"),
        ],
    ),
    (
        "Time to first token",
        "s",
        [
            (
                f"histogram_quantile({q}, sum by (le, host) "
                f"(rate(sglang:time_to_first_token_seconds_bucket{{{SELECTED}}}[{RATE}])))",
                f"{{{{host}}}} p{round(q * 100)}",
            )
            for q in (0.5, 0.99)
        ],
    ),
    (
        "Time per output token",
        "s",
        [
            (
                f"histogram_quantile({q}, sum by (le, host) "
                f"(rate(sglang:inter_token_latency_seconds_bucket{{{SELECTED}}}[{RATE}])))",
                f"{{{{host}}}} p{round(q * 100)}",
            )
            for q in (0.5, 0.99)
        ],
    ),
    (
        "KV cache in use",
        "percentunit",
        [(f"sglang:token_usage{{{SELECTED}}}", "{{host}}")],
    ),
    (
        "Requests running and queued",
        "short",
        [
            (f"sglang:num_running_reqs{{{SELECTED}}}", "{{host}} running"),
            (f"sglang:num_queue_reqs{{{SELECTED}}}", "{{host}} queued"),
        ],
    ),
    (
        "Prefix cache hit rate",
        "percentunit",
        [(f"sglang:cache_hit_rate{{{SELECTED}}}", "{{host}}")],
    ),
    (
        "Hosts per bundle (a rollout moves them from one to the next)",
        "short",
        [(f"count by (bundle_digest) (sglx_info{{{SELECTED}}})", "{{bundle_digest}}")],
    ),
    (
        "Prebuilt Triton cache entries at start",
        "short",
        [(f"sglx_prebuilt_triton_cache_entries{{{SELECTED}}}", "{{host}} {{state}}")],
    ),
    (
        "Server starts in the last hour",
        "short",
        [(f"changes(sglx_server_start_time_seconds{{{SELECTED}}}[1h])", "{{host}}")],
    ),
    (
        "Serving gate on its timer: each check's last result (1 passed, 0 failed)",
        "short",
        [
            (
                f"min by (host, check) (sglx_gate_check_passed{{{GATE_SELECTED}}})",
                "{{host}} {{check}}",
            )
        ],
    ),
    (
        "Serving gate on its timer: time since its last judged run",
        "s",
        [(f"time() - sglx_gate_last_run_timestamp_seconds{{{GATE_SELECTED}}}", "{{host}}")],
    ),
]


def _variable(name: str, query: str) -> dict[str, Any]:
    return {
        "name": name,
        "type": "query",
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "query": {"query": query, "refId": name},
        "definition": query,
        "refresh": 2,
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "current": {"text": "All", "value": "$__all"},
    }


def _panel(index: int, title: str, unit: str, queries: list[tuple[str, str]]) -> dict[str, Any]:
    return {
        "id": index + 1,
        "type": "timeseries",
        "title": title,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": 12, "x": 12 * (index % 2), "y": 8 * (index // 2)},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [
            {"refId": chr(ord("A") + n), "expr": expr, "legendFormat": legend}
            for n, (expr, legend) in enumerate(queries)
        ],
    }


def dashboard_document() -> dict[str, Any]:
    """The dashboard's JSON model (Grafana's schema 39)."""
    return {
        "uid": UID,
        "title": "sglx fleet",
        "description": "sglang's and sglx's series of an sglx fleet, per host and fleet "
        "(docs/reference/observability.md)",
        "tags": ["sglx", "sglang"],
        "schemaVersion": 39,
        "editable": True,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "templating": {
            "list": [
                {"name": "datasource", "type": "datasource", "query": "prometheus"},
                _variable("fleet", f'label_values(up{{job="{JOB}"}}, fleet)'),
                _variable("host", f'label_values(up{{job="{JOB}", fleet=~"$fleet"}}, host)'),
            ]
        },
        "panels": [_panel(i, *panel) for i, panel in enumerate(PANELS)],
    }


def dashboard_queries() -> list[str]:
    """Every panel's query, as the dashboard holds it (with $fleet and $host)."""
    return [target["expr"] for p in dashboard_document()["panels"] for target in p["targets"]]


def dashboard_text() -> str:
    return json.dumps(dashboard_document(), indent=2) + "\n"


def grafana_dashboard(out: Path | None, check: bool) -> Result:
    """Print the dashboard, write it to `out` (atomically), or check `out` is current."""
    return print_write_or_check(
        ("ansible", "dashboard"),
        dashboard_text(),
        {"dashboard": {"uid": UID, "queries": dashboard_queries()}},
        out,
        check,
        again="sglx ansible dashboard",
        source="the panels it is rendered from",
        stale_code="grafana_dashboard_stale",
    )
