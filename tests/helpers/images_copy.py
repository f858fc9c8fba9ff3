"""A private copy of images/ (and bundles/locks/) that tests may edit; SGLX_IMAGES_DIR points
the tool at it. Locks and wheelhouses resolve relative to the copy."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]


def copy_images(dst: Path) -> Path:
    """dst/images and dst/bundles/locks, copied from the checkout; returns dst/images."""
    shutil.copytree(REPO / "images", dst / "images")
    shutil.copytree(REPO / "bundles" / "locks", dst / "bundles" / "locks")
    return dst / "images"


def edit_yaml(path: Path, changes: dict[str, Any]) -> None:
    """Merge `changes` (nested mappings) into the YAML file at `path`."""
    document = yaml.safe_load(path.read_text()) or {}

    def merge(into: dict[str, Any], update: dict[str, Any]) -> None:
        for key, value in update.items():
            if isinstance(value, dict) and isinstance(into.get(key), dict):
                merge(into[key], value)
            else:
                into[key] = value

    merge(document, changes)
    path.write_text(yaml.safe_dump(document, sort_keys=False))
