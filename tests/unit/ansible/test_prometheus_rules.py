"""The Prometheus rules a site loads (issue 41): rendered by `sglx ansible rules`, committed
current, accepted by promtool, every alert covered by a `promtool test rules` case
(tests/prometheus/sglx.rules.test.yml) that fires it, and every series a rule reads one that
sglang 0.5.23 or sglx actually writes. The Grafana dashboard (`sglx ansible dashboard`) is held to
the same: committed current, every query valid PromQL to promtool and over written series."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

import sglx_platform.metrics
import sglx_runtime.gate_tick
from sglx.commands.trace import comm_share_series
from sglx.grafana_dashboard import (
    DASHBOARD_FILE,
    dashboard_document,
    dashboard_queries,
    dashboard_text,
)
from sglx.prometheus_rules import RULES_FILE, rules_document, rules_text
from sglx_core.comm_share import Share

REPO = Path(__file__).resolve().parents[3]
CASES = REPO / "tests" / "prometheus" / "sglx.rules.test.yml"
# A series name in a PromQL expression: an identifier followed by a selector, a range or a
# closing parenthesis, never a function (followed by "(") or a label (after "by (").
_SERIES = re.compile(r"\b([a-zA-Z_][a-zA-Z0-9_]*:?[a-zA-Z0-9_:]*)(?=\{)")
# And a bare one of sglang's or sglx's (`a > b`, no selector): no label or function has their
# prefixes; a recording rule's name (level:metric:operations) is not matched here.
_OURS = re.compile(r"(?<![\w:])(sglx_[a-z_]+|sglang:[a-z_]+)(?![\w:(])")


def series_in(expr: str) -> set[str]:
    return set(_SERIES.findall(expr)) | set(_OURS.findall(expr))


def promtool(*argv: str) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("promtool")
    assert tool, "promtool is missing: `make setup` installs Debian's prometheus package"
    return subprocess.run([tool, *argv], capture_output=True, text=True, timeout=120, cwd=REPO)


def test_the_committed_rules_are_what_sglx_renders_and_promtool_accepts_them() -> None:
    assert (REPO / RULES_FILE).read_text() == rules_text()
    checked = promtool("check", "rules", str(RULES_FILE))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_every_alert_fires_in_a_promtool_case() -> None:
    result = promtool("test", "rules", str(CASES.relative_to(REPO)))
    assert result.returncode == 0, result.stdout + result.stderr
    alerts = {r["alert"] for g in rules_document()["groups"] for r in g["rules"] if "alert" in r}
    fired = {
        case["alertname"]
        for test in yaml.safe_load(CASES.read_text())["tests"]
        for case in test["alert_rule_test"]
        if case["exp_alerts"]
    }
    assert alerts == fired


def _written_series() -> set[str]:
    """Every series name sglang 0.5.23 declares, and sglx's (sglx_platform.metrics, and the
    gate timer's, sglx_runtime.gate_tick)."""
    import sglang

    root = Path(sglang.__file__).parent / "srt"
    names: set[str] = set()
    for path in root.rglob("*.py"):
        names |= set(re.findall(r'name="(sglang:[a-z_]+)"', path.read_text(errors="replace")))
    source = Path(sglx_platform.metrics.__file__).read_text()
    names |= {"sglx_" + n for n in re.findall(r'PREFIX \+ "([a-z_]+)"', source)}
    gate = Path(sglx_runtime.gate_tick.__file__).read_text()
    names |= set(re.findall(r'Gauge\(\s*"(sglx_[a-z_]+)"', gate))
    # `sglx trace comm-share --textfile`'s, as it renders them
    share = Share("t", "device", 1.0, 2.0, ())
    names |= {f.name for f in text_string_to_metric_families(comm_share_series([share], 0.3, 0))}
    return names | {"up"}  # Prometheus's own, per target


@pytest.mark.parametrize(
    "rule",
    [r for g in rules_document()["groups"] for r in g["rules"]],
    ids=lambda r: r.get("alert") or r["record"],
)
def test_every_series_a_rule_reads_is_written_by_sglang_or_sglx(rule: dict[str, str]) -> None:
    used = series_in(rule["expr"]) - _recorded()
    assert used <= _written_series(), used - _written_series()


def test_a_stale_rules_file_is_a_finding_naming_the_fix(tmp_path: Path) -> None:
    import sys

    stale = tmp_path / "sglx.rules.yml"
    stale.write_text("groups: []\n")
    sglx = Path(sys.executable).parent / "sglx"
    proc = subprocess.run(
        [str(sglx), "ansible", "rules", "--out", str(stale), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "prometheus_rules_stale" in proc.stdout
    assert f"re-render it: sglx ansible rules --out {stale}" in proc.stdout
    assert stale.read_text() == "groups: []\n"


def _recorded() -> set[str]:
    return {r["record"] for g in rules_document()["groups"] for r in g["rules"] if "record" in r}


def test_the_committed_dashboard_is_what_sglx_renders() -> None:
    assert (REPO / DASHBOARD_FILE).read_text() == dashboard_text()
    document = dashboard_document()
    ids = [panel["id"] for panel in document["panels"]]
    assert len(ids) == len(set(ids)) and all(p["targets"] for p in document["panels"])
    variables = {v["name"] for v in document["templating"]["list"]}
    assert variables == {"datasource", "fleet", "host"}


def test_every_dashboard_query_is_promql_over_written_series(tmp_path: Path) -> None:
    """Each query, its variables given a value, as a recording rule promtool checks; each series
    it names is sglang's, sglx's (a histogram's by its _bucket) or a rule's recording."""
    rules = [
        {"record": f"dashboard:query_{n}", "expr": q.replace("$fleet", ".*").replace("$host", ".*")}
        for n, q in enumerate(dashboard_queries())
    ]
    queries = {"groups": [{"name": "dashboard", "rules": rules}]}
    (tmp_path / "queries.yml").write_text(yaml.safe_dump(queries))
    checked = promtool("check", "rules", str(tmp_path / "queries.yml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    used = {re.sub(r"_bucket$", "", name) for q in dashboard_queries() for name in series_in(q)}
    assert used - _recorded() <= _written_series(), used - _recorded() - _written_series()
