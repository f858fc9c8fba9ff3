"""Stands in for `sglang.launch_server` under sglx-serve: records what the server would get.

sglx-serve runs `python -m <SERVER_MODULE> ARGS`; tests point SERVER_MODULE here. The probe
writes its environment and arguments as JSON to $SGLX_TEST_PROBE_OUT and exits 0.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

if __name__ == "__main__":
    record = {"environ": dict(os.environ), "argv": sys.argv[1:], "pid": os.getpid()}
    out = Path(os.environ["SGLX_TEST_PROBE_OUT"])
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    tmp.replace(out)
