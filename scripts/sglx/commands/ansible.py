"""`sglx ansible`: render the arch profile into the Ansible roles' variables (the parser and
its handler).

Registered by `sglx.cli`, which owns the shared options and the error envelope.
"""

from __future__ import annotations

import argparse

from sglx.cli_shared import EPILOG, Subparsers, rendered_file_options
from sglx_core.report import Result


def register(
    sub: Subparsers, common: argparse.ArgumentParser, arch_parent: argparse.ArgumentParser
) -> None:
    """Add the group's parser and verbs to `sub` (`arch_parent` carries --arch)."""
    ansible = sub.add_parser(
        "ansible",
        help="render the arch profile into the Ansible roles' variables",
        description="The roles under ansible/ restate no arch fact: they read the variables "
        "rendered here from the profile. Reference: docs/reference/ansible.md.",
        epilog=EPILOG,
    )
    verbs = ansible.add_subparsers(dest="verb", required=True, metavar="VERB")
    p = verbs.add_parser(
        "vars",
        parents=[common, arch_parent],
        help="print (or write) the role variables of an arch",
        description="Print the variables as a YAML group_vars file, or write it with --out "
        "(atomically). --check compares --out with the profile and exits 1 when it is stale.",
    )
    rendered_file_options(p, "the variables", _cmd_ansible_vars)
    p = verbs.add_parser(
        "rules",
        parents=[common],
        help="print (or write) the Prometheus rules that watch an sglx fleet",
        description="Recording rules and alerts over sglang's and sglx's series, as the site's "
        "Prometheus loads them (ansible/prometheus/sglx.rules.yml; docs/reference/"
        "observability.md). --check compares --out with what sglx renders and exits 1 when it "
        "is stale.",
    )
    rendered_file_options(p, "the rules", _cmd_ansible_rules)
    p = verbs.add_parser(
        "dashboard",
        parents=[common],
        help="print (or write) the Grafana dashboard of an sglx fleet",
        description="Throughput, latency percentiles, KV cache, requests, cache hits and "
        "restarts per host and fleet, over the series the rules watch, as a Grafana dashboard "
        "JSON a site imports (ansible/prometheus/sglx.dashboard.json; docs/reference/"
        "observability.md). --check compares --out with what sglx renders and exits 1 when it "
        "is stale.",
    )
    rendered_file_options(p, "the dashboard", _cmd_ansible_dashboard)


def _cmd_ansible_vars(args: argparse.Namespace) -> Result:
    from sglx.ansible_vars import ansible_vars

    return ansible_vars(args.arch, args.out, args.check)


def _cmd_ansible_rules(args: argparse.Namespace) -> Result:
    from sglx.prometheus_rules import prometheus_rules

    return prometheus_rules(args.out, args.check)


def _cmd_ansible_dashboard(args: argparse.Namespace) -> Result:
    from sglx.grafana_dashboard import grafana_dashboard

    return grafana_dashboard(args.out, args.check)
