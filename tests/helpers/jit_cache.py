"""What a node-local JIT cache folder holds (sglx_core.jit_cache), to compare across starts."""

from __future__ import annotations

from pathlib import Path


def cache_entries(folder: Path) -> dict[str, int]:
    """Every file and folder under `folder`, by its path relative to it: a file's size, -1 for
    a folder. A start that compiled something adds an entry (or grows one)."""
    return {
        str(path.relative_to(folder)): -1 if path.is_dir() else path.stat().st_size
        for path in sorted(folder.rglob("*"))
    }
