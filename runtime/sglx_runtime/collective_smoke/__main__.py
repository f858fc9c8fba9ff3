"""`python -m sglx_runtime.collective_smoke`: the smoke on this node (see the package's docstring).

Guarded: the ranks a node spawns import this module again (as `__mp_main__`) and must not start
a smoke of their own; they run `node._child`, which they unpickle from the module both sides
import under one name."""

from __future__ import annotations

import sys

from sglx_runtime.collective_smoke.node import main

if __name__ == "__main__":
    sys.exit(main())
