"""A private copy of images/ (and bundles/locks/) that tests may edit; SGLX_IMAGES_DIR points
the tool at it. Locks and wheelhouses resolve relative to the copy."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from sglx.wheels.lockfile import parse

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


def lock_from_wheelhouse(
    images: Path, arches: list[str], wheels: Path, run: Callable[..., Any]
) -> Path:
    """`sglx wheels lock` for each arch of the copy from the wheels in `wheels` alone (pip's
    --find-links, no index), then `sglx wheels fetch` into images/../wheelhouse/shared, filled
    first with hard links to the locked wheels: the fetch finds each one present and checks its
    hash, nothing is downloaded. The test profiles lock subsets of the cpu lock's wheels (the
    same Python, sglang and platform): resolving them from the cpu wheelhouse costs no index
    round trips, gives the same answer on any day, and matches the fixture bases built from that
    wheelhouse. `run(*argv, **env)` runs the CLI against the copy with `env` added to its
    environment, asserting success. Returns the folder."""
    shared = images.parent / "wheelhouse" / "shared"
    shared.mkdir(parents=True, exist_ok=True)
    for arch in arches:
        # PIP_NO_INDEX is pip's own switch: only --find-links is read.
        run("wheels", "lock", "--arch", arch, "--find-links", str(wheels), PIP_NO_INDEX="1")
    for arch in arches:
        for wheel in parse(images.parent / "bundles" / "locks" / f"{arch}.txt").wheels:
            if not (shared / wheel.filename).exists():
                try:
                    os.link(wheels / wheel.filename, shared / wheel.filename)
                except OSError:  # another filesystem
                    shutil.copy2(wheels / wheel.filename, shared / wheel.filename)
    for arch in arches:
        run("wheels", "fetch", "--arch", arch, "--dest", str(shared))
    return shared
