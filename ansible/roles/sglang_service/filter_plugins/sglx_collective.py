"""How many devices of each node a server uses, read from its sglang flags: the collective smoke's
--nproc-per-node (tasks/collective.yml).

The smoke runs one process per device the server will use, before the server starts. The role
knows that number only where the site's server arguments say it: sglang puts tp x pp ranks
over --nnodes nodes (ServerArgs: `--tp-size`, which argparse also takes as `--tp`, and
`--tensor-parallel-size`; `--pp-size`, `--pipeline-parallel-size`), so a node runs
tp x pp / nnodes of them. A server whose tensor parallelism the serving profile picks at start
(sglx_core.serving, from the devices it finds) names none here: the site sets
sglang_service_gate_collective_nproc_per_node instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError

TP_FLAGS = ("--tp", "--tp-size", "--tensor-parallel-size")
PP_FLAGS = ("--pp-size", "--pipeline-parallel-size")


def _flag(args: Sequence[Any], names: tuple[str, ...]) -> int | None:
    """The value of the last of `names` in `args` (`--flag N` or `--flag=N`; later flags win,
    as in sglang's parser), else None."""
    value: str | None = None
    words = [str(a) for a in args]
    for i, word in enumerate(words):
        name, eq, inline = word.partition("=")
        if name not in names:
            continue
        if eq:
            value = inline
        elif i + 1 < len(words):
            value = words[i + 1]
        else:
            raise AnsibleFilterError(f"sglang_service_args ends with {word} and no value after it")
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise AnsibleFilterError(
            f"sglang_service_args: {names[0]} {value!r} is not a whole number of 1 or more"
        )
    return number


def sglx_devices_per_node(args: Sequence[Any], nnodes: Any) -> int:
    """tp x pp of the server arguments over `nnodes` nodes: the devices one node uses; 1 when
    the arguments name neither (the serving profile then picks tp, unseen from here)."""
    nodes = int(nnodes)
    if nodes < 1:
        raise AnsibleFilterError(f"a serving group of {nodes} nodes serves nothing")
    tp, pp = _flag(args, TP_FLAGS), _flag(args, PP_FLAGS)
    if tp is None and pp is None:
        return 1
    ranks = (tp or 1) * (pp or 1)
    if ranks % nodes:
        raise AnsibleFilterError(
            f"sglang_service_args put tp x pp = {ranks} ranks over {nodes} nodes, which does not "
            "divide evenly (sglang refuses it too): fix --tp/--pp, or set "
            "sglang_service_gate_collective_nproc_per_node"
        )
    return max(ranks // nodes, 1)


def sglx_docker_volume(mount: Mapping[str, Any]) -> str:
    """One of sglang_service_mounts as the `--volume=SOURCE:TARGET[:ro]` the unit writes."""
    read_only = ":ro" if mount.get("read_only", True) else ""
    return f"--volume={mount['source']}:{mount['target']}{read_only}"


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "sglx_devices_per_node": sglx_devices_per_node,
            "sglx_docker_volume": sglx_docker_volume,
        }
