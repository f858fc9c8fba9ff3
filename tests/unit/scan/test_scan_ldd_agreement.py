"""Agreement with the system loader on real trees of this machine's Python environment.

The scan runs with root `/` over parts of site-packages (torch, numpy, Pillow, NVIDIA and
Triton libraries: RPATHs, RUNPATHs, `$ORIGIN` chains across wheels), and for every file `ldd`
accepts, each name ldd lists must resolve to the same file. Running ldd is safe here: these
are the project's own installed packages, and ldd only traces the loading.
"""

from __future__ import annotations

import shutil
import sysconfig
from pathlib import Path

import pytest
from test_scan_support import ldd, resolved, scan

SITE = Path(sysconfig.get_paths()["platlib"])
TREES = (
    "torch/lib",
    "numpy.libs",
    "numpy/_core",
    "PIL",
    "pillow.libs",
    "nvidia/cu13/lib",
    "triton/_C",
)
INTERPRETER = "ld-linux-x86-64.so.2"  # ldd prints it as a bare path, not "name => path"


@pytest.mark.skipif(shutil.which("ldd") is None, reason="no ldd on this machine")
def test_every_name_ldd_resolves_resolves_to_the_same_file() -> None:
    trees = [SITE / t for t in TREES if (SITE / t).is_dir()]
    if not trees:
        pytest.skip(f"no compiled packages under {SITE}")
    report = scan(Path("/"), *(str(t) for t in trees))
    assert report.closures is not None
    compared = 0
    disagreements = []
    files = [Path(c.root) for c in report.closures]
    for file in files:
        theirs = ldd(file)
        if theirs is None:
            continue
        ours = resolved(report, Path("/"), file)
        for name, path in theirs.items():
            if name == INTERPRETER:
                continue
            compared += 1
            if ours.get(name, "absent") != path:
                disagreements.append(f"{file}: {name}: ldd {path}, sglx {ours.get(name, 'absent')}")
    assert disagreements == []
    assert compared >= 100, f"only {compared} names compared in {len(files)} files"
