"""The rollout's batches (the sglx_rollout role's filter_plugins/sglx_rollout.py): a serving
group is one batch in node-rank order; the other hosts go sglx_rollout_serial at a time."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from ansible.errors import AnsibleFilterError

ROLE = Path(__file__).resolve().parents[3] / "ansible" / "roles" / "sglx_rollout"
PLUGIN = ROLE / "filter_plugins" / "sglx_rollout.py"


def _plugin() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sglx_rollout", PLUGIN)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


rollout = _plugin()
# The play's hosts in inventory order; the group's own order (its node ranks) differs.
HOSTS = ["s1", "g-b", "s2", "g-a", "s3"]
GROUPS = {"pair": ["g-a", "g-b"]}
HOSTVARS = {h: {"sglang_service_group": "pair" if h.startswith("g-") else ""} for h in HOSTS}


def test_a_group_is_one_batch_at_its_first_host_in_node_rank_order() -> None:
    assert rollout.sglx_rollout_order(HOSTS, HOSTVARS, GROUPS) == ["s1", "g-a", "g-b", "s2", "s3"]
    assert rollout.sglx_rollout_batches(HOSTS, HOSTVARS, GROUPS, 1) == [1, 2, 1, 1]


def test_the_other_hosts_go_serial_at_a_time_between_groups() -> None:
    assert rollout.sglx_rollout_batches(HOSTS, HOSTVARS, GROUPS, "2") == [1, 2, 2]
    alone = {h: {} for h in ["a", "b", "c"]}
    assert rollout.sglx_rollout_batches(["a", "b", "c"], alone, {}, 2) == [2, 1]


def test_a_group_cut_by_the_host_pattern_is_refused() -> None:
    with pytest.raises(AnsibleFilterError, match=r"serving group pair: g-b not in this rollout"):
        rollout.sglx_rollout_order(["s1", "g-a"], HOSTVARS, GROUPS)


@pytest.mark.parametrize(
    ("hostvars", "groups", "said"),
    [
        ({"g-a": {"sglang_service_group": "pairs"}}, GROUPS,
         "'pairs', which is no inventory group"),
        ({"g-a": {"sglang_service_group": "pair"}, "g-b": {}}, GROUPS,
         "g-b is in the inventory group but its sglang_service_group is not 'pair'"),
    ],
)  # fmt: skip
def test_a_group_named_wrong_is_refused_with_the_fix(
    hostvars: dict, groups: dict, said: str
) -> None:
    with pytest.raises(AnsibleFilterError, match=said):
        rollout.sglx_rollout_order(list(hostvars), hostvars, groups)


def test_serial_below_one_is_refused() -> None:
    with pytest.raises(AnsibleFilterError, match="sglx_rollout_serial is 0"):
        rollout.sglx_rollout_batches(HOSTS, HOSTVARS, GROUPS, 0)
