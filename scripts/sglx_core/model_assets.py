"""Files a model loads at start from outside its weights (the profile's `weights.model_assets`).

gpt-oss is the case that made this: its chat format (openai_harmony) loads the o200k_base
vocabulary when the server starts and downloads it when it is missing, which an air-gapped
site cannot do. The profile names such files by the model's config.json architecture, with
their sha256 and where they are published. Two readers hold a model to them: `sglx weights
convert`, before anything is written, and sglx-serve, before the server starts, which also sets
the variables that point the loaders at the model's folder.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sglx_core.errors import SglxError
from sglx_core.hashing import sha256_file
from sglx_core.profile.schema import ModelAssets, Profile

MAX_ASSET_BYTES = 64 << 20
"""Largest asset hashed (o200k_base.tiktoken is 3.6 MB)."""
MODEL_PLACEHOLDER = "{model}"


def needed(profile: Profile, config: Any) -> list[tuple[str, ModelAssets]]:
    """The asset sets of the model's config.json architectures, in config order."""
    architectures = config.get("architectures") if isinstance(config, Mapping) else None
    if not isinstance(architectures, list):
        return []
    table = profile.weights.model_assets
    return [(a, table[a]) for a in architectures if isinstance(a, str) and a in table]


def problems(profile: Profile, config: Any, folder: Path) -> list[str]:
    """One line per asset that is missing, not a regular file, too large or not the published
    file (its sha256); empty when every asset is there."""
    found: list[str] = []
    for architecture, assets in needed(profile, config):
        for name, digest in assets.files.items():
            what = f"{architecture} needs {name} (sha256 {digest})"
            try:
                info = os.lstat(folder / name)
            except FileNotFoundError:
                found.append(f"{what}, which is not in {folder}: {assets.reason}")
                continue
            except OSError as exc:
                found.append(f"{what}: {folder / name} cannot be read ({exc.strerror})")
                continue
            if not stat.S_ISREG(info.st_mode):
                found.append(f"{what}: {folder / name} is not a regular file")
            elif info.st_size > MAX_ASSET_BYTES:
                found.append(f"{what}: {folder / name} is {info.st_size} bytes, not it")
            elif (got := sha256_file(folder / name)) != digest:
                found.append(f"{what}: {folder / name} has sha256 {got}, another file")
    return found


def require(profile: Profile, config: Any, folder: Path) -> None:
    """Raise SglxError (code `missing_model_asset`) naming every problem and where each file is
    published, unless every asset the model needs is in `folder`."""
    found = problems(profile, config, folder)
    if not found:
        return
    sources = sorted({assets.source for _, assets in needed(profile, config)})
    raise SglxError(
        "; ".join(found),
        hint="on a connected machine fetch "
        + ", ".join(sources)
        + ", check its sha256 (sha256sum), and put it beside config.json",
        code="missing_model_asset",
        path=str(folder),
    )


def env_for(
    profile: Profile, config: Any, folder: Path, environ: Mapping[str, str]
) -> dict[str, str]:
    """The variables that point the model's loaders at its folder, less those `environ` has."""
    wanted: dict[str, str] = {}
    for _, assets in needed(profile, config):
        for name, value in assets.env.items():
            if name not in environ:
                wanted[name] = value.replace(MODEL_PLACEHOLDER, str(folder))
    return wanted
