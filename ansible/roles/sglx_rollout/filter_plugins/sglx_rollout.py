"""The sglx_rollout role's batches (entry point `batches`): a serving group is one unit of
the serial rollout.

A serving group is an inventory group whose hosts run one server together (sglang
`--nnodes N`); each of its hosts names it in `sglang_service_group`. Its hosts must stop,
start and pass the health gate together: a node restarted alone cannot rejoin its group. So
the play's hosts are ordered with each group's hosts together, at the place of its first host
and in the group's inventory order (node ranks), and `serial` becomes a list of batch sizes:
a group is one batch, the other hosts go `sglx_rollout_serial` at a time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError

GROUP_VAR = "sglang_service_group"


def _units(
    hosts: Sequence[str], hostvars: Mapping[str, Any], groups: Mapping[str, Sequence[str]]
) -> list[list[str]]:
    """The play's hosts as rollout units, in order: a serving group's hosts, or one host."""
    units: list[list[str]] = []
    placed: set[str] = set()
    selected = set(hosts)
    for host in hosts:
        if host in placed:
            continue
        group = str(hostvars[host].get(GROUP_VAR) or "")
        if not group:
            units.append([host])
            placed.add(host)
            continue
        if group not in groups:
            raise AnsibleFilterError(
                f"{host}: {GROUP_VAR} is {group!r}, which is no inventory group: name the "
                "inventory group whose hosts serve together"
            )
        members = list(groups[group])
        missing = [m for m in members if m not in selected]
        if missing:
            raise AnsibleFilterError(
                f"serving group {group}: {', '.join(missing)} not in this rollout; a group rolls "
                "out whole: widen the host pattern (sglx_hosts) or --limit"
            )
        elsewhere = [m for m in members if str(hostvars[m].get(GROUP_VAR) or "") != group]
        if elsewhere:
            raise AnsibleFilterError(
                f"serving group {group}: {', '.join(elsewhere)} is in the inventory group but "
                f"its {GROUP_VAR} is not {group!r}: set it on the group's vars"
            )
        units.append(members)
        placed.update(members)
    return units


def sglx_rollout_order(
    hosts: Sequence[str], hostvars: Mapping[str, Any], groups: Mapping[str, Sequence[str]]
) -> list[str]:
    """The play's hosts, each serving group's hosts together in node-rank order."""
    return [host for unit in _units(hosts, hostvars, groups) for host in unit]


def sglx_rollout_batches(
    hosts: Sequence[str],
    hostvars: Mapping[str, Any],
    groups: Mapping[str, Sequence[str]],
    serial: int | str = 1,
) -> list[int]:
    """Batch sizes for `serial`, over the hosts in sglx_rollout_order: a serving group is one
    batch; other hosts that follow each other go up to `serial` at a time."""
    size = int(serial)
    if size < 1:
        raise AnsibleFilterError(f"sglx_rollout_serial is {serial}: it must be 1 or more")
    batches: list[int] = []
    alone = 0
    for unit in _units(hosts, hostvars, groups):
        if len(unit) == 1 and not hostvars[unit[0]].get(GROUP_VAR):
            alone += 1
            if alone == size:
                batches.append(alone)
                alone = 0
            continue
        if alone:
            batches.append(alone)
            alone = 0
        batches.append(len(unit))
    if alone:
        batches.append(alone)
    return batches


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "sglx_rollout_order": sglx_rollout_order,
            "sglx_rollout_batches": sglx_rollout_batches,
        }
