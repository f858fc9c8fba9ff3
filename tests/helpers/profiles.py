"""Resolved arch profiles written to files, the way an image bakes /etc/sglx/arch.yaml."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from sglx_core.profile import load_profile


def bake(arch: str, dst: Path, **changes: Any) -> Path:
    """Write the resolved profile of `arch` to `dst`, with top-level sections updated.

    `changes` maps a section to a dict merged into it, e.g. kernels={"serve": []}.
    """
    document = load_profile(arch).to_json()
    for section, update in changes.items():
        if isinstance(update, dict) and isinstance(document.get(section), dict):
            document[section] = {**document[section], **update}
        else:
            document[section] = update
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text(yaml.safe_dump(document, sort_keys=False))
    return dst
