"""The serving gate's collective smoke: an all-reduce over every device a serving group will use.

Started on each node of a group before the server (`python -m sglx_runtime.collective_smoke`,
this package's `__main__`: a program of its own, which nothing else in the runtime imports), one
process per local device, with the backend the profile names (gloo on cpu; torch's 'nccl'
name, which RCCL serves on ROCm and BKCL through torch_xmlir on Kunlun). It automates the
debugging step multi-node deadlocks call for, "a barrier, then every rank prints its rank and
host", and bounds it:

1. Rendezvous, before any process group exists. Rank 0 (node 0, local rank 0) serves a
   torch TCPStore at --master-addr:--master-port; every rank writes `arrived/<rank>` there. Rank
   0 waits at most --timeout-s for all of them, then names exactly which ranks never arrived
   and the host each should have run on (--hosts), and every process exits 1 instead of
   hanging in a collective. A node that cannot reach the master gives up at the same timeout,
   naming the master. After a complete rendezvous each rank prints "rank R/W on HOST arrived".
2. The all-reduce: the process group over that store, a float32 buffer of --size-bytes, each
   rank filled with rank+1 so the sum must be n(n+1)/2 everywhere (checked before and after the
   timed loop), --warmup then --iters timed operations. The slowest rank's time gives algbw and
   busbw (`sglx_core.gate.collective.bus_bandwidth`, nccl-tests' formula), held against
   --floor-gbps where the profile sets one.
3. Every rank posts its result to the store; each node's local rank 0 collects all of them and
   the node prints one report (`CollectiveReport`; `--json`: the document only, on stdout).
   Node 0's is the group's. Progress lines go to stderr.

Exit codes: 0 ok; 1 findings (a missing rank, an unreachable master, a failed or wrong
all-reduce, bandwidth below the floor); 2 the smoke could not run here (usage, no torch, no
such backend or device, the master port taken). Expected failures print no traceback.

Every setting is a command-line argument; torch is imported only by the ranks, so the launcher
of a node with several devices costs no torch import of its own.
"""

from sglx_runtime.collective_smoke.node import main, run_node
from sglx_runtime.collective_smoke.report import summarize, text
from sglx_runtime.collective_smoke.settings import Settings, parser, settings

__all__ = ["Settings", "main", "parser", "run_node", "settings", "summarize", "text"]
