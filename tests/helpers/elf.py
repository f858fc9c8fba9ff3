"""Shared libraries compiled in the test with gcc, standing in for vendor libraries."""

from __future__ import annotations

import subprocess
from pathlib import Path


def shared_library(folder: Path, soname: str, source: str, *extra: str) -> Path:
    """Compile `source` (C) into folder/soname with that SONAME."""
    folder.mkdir(parents=True, exist_ok=True)
    c_file = folder / f"{soname}.c"
    c_file.write_text(source)
    out = folder / soname
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", str(out), str(c_file), f"-Wl,-soname,{soname}", *extra],
        check=True,
    )
    c_file.unlink()
    return out
