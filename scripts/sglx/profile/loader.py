"""Reading profiles: YAML layers of an extends chain, merged, then validated.

A profile may ``extends:`` shared fragments in `images/shared/<name>.yaml` (which may extend
others). Mappings merge key by key; lists and scalars in the later file replace earlier ones;
a key set to null removes what earlier files set.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from sglx.errors import SglxError
from sglx.profile.issues import (
    KeyPath,
    ProfileError,
    ProfileIssue,
    describe_kind,
    dotted,
    pydantic_issue,
)
from sglx.profile.schema import Profile

PROFILE_FILE = "arch.yaml"
SHARED_DIR = "shared"
IMAGES_DIR_ENV = "SGLX_IMAGES_DIR"


@dataclass(frozen=True)
class _Layer:
    """One YAML file of a profile's extends chain, with the line of every key path."""

    file: Path
    data: dict[str, Any]
    lines: Mapping[KeyPath, int]

    @property
    def shown(self) -> str:
        return display_path(self.file)


def display_path(path: Path) -> str:
    """`path` relative to the working directory when it is below it (shorter messages)."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _read_layer(file: Path) -> _Layer:
    shown = display_path(file)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ProfileError([ProfileIssue(shown, "", "file not found")]) from None
    except OSError as exc:
        raise ProfileError([ProfileIssue(shown, "", f"cannot read: {exc.strerror}")]) from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line = None if mark is None else mark.line + 1
        problem = " ".join(p for p in (exc.context, exc.problem) if p)
        raise ProfileError(
            [ProfileIssue(shown, "", f"invalid YAML: {problem}", line)],
            hint="check indentation and quoting around the reported line",
        ) from None
    except yaml.YAMLError as exc:
        raise ProfileError([ProfileIssue(shown, "", f"invalid YAML: {exc}")]) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ProfileError(
            [
                ProfileIssue(
                    shown, "", f"expected a mapping at the top, found {describe_kind(data)}", 1
                )
            ]
        )
    lines: dict[tuple[str | int, ...], int] = {}
    duplicates: list[ProfileIssue] = []
    if node is not None:
        for path, key_node, seen_before in _walk_nodes(node, ()):
            if seen_before:
                duplicates.append(
                    ProfileIssue(
                        shown,
                        dotted(path),
                        "duplicate key (YAML keeps only the last one)",
                        key_node.start_mark.line + 1,
                    )
                )
            lines.setdefault(path, key_node.start_mark.line + 1)
    if duplicates:
        raise ProfileError(duplicates)
    return _Layer(file=file, data=data, lines=lines)


def _walk_nodes(node: yaml.Node, prefix: KeyPath) -> Iterator[tuple[KeyPath, yaml.Node, bool]]:
    """Each key path with its node, and whether the key repeats in its mapping."""
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value)
            path = (*prefix, key)
            yield path, key_node, key in seen
            seen.add(key)
            yield from _walk_nodes(value_node, path)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            path = (*prefix, index)
            yield path, item, False
            yield from _walk_nodes(item, path)


def _merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Mappings merge key by key; lists and scalars in `over` replace those in `base`; a key
    set to null in `over` is removed (the schema's default applies)."""
    merged = dict(base)
    for key, value in over.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def images_dir() -> Path:
    """Where the arch profiles live: $SGLX_IMAGES_DIR, else `images/` of this checkout."""
    override = os.environ.get(IMAGES_DIR_ENV)
    if override:
        path = Path(override)
        if not path.is_dir():
            raise SglxError(
                f"{IMAGES_DIR_ENV}={override} is not a directory",
                hint="point it at the images/ folder that holds <arch>/arch.yaml",
                code="environment",
            )
        return path
    path = Path(__file__).resolve().parents[3] / "images"
    if not path.is_dir():
        raise SglxError(
            f"no images/ folder found next to the sglx package ({path})",
            hint=f"set {IMAGES_DIR_ENV} to the folder that holds <arch>/{PROFILE_FILE}",
            code="environment",
        )
    return path


def known_arches(root: Path | None = None) -> list[str]:
    root = images_dir() if root is None else root
    return sorted(p.parent.name for p in root.glob(f"*/{PROFILE_FILE}"))


def profile_path(arch: str, root: Path | None = None) -> Path:
    root = images_dir() if root is None else root
    path = root / arch / PROFILE_FILE
    if not path.is_file():
        known = known_arches(root)
        close = difflib.get_close_matches(arch, known, n=1)
        guess = f"; did you mean '{close[0]}'?" if close else ""
        raise SglxError(
            f"unknown arch '{arch}'{guess}",
            hint=f"known arches: {', '.join(known)} (each is {root}/<arch>/{PROFILE_FILE})",
            code="unknown_arch",
        )
    return path


def load_profile(arch: str, root: Path | None = None) -> Profile:
    """Load and validate the profile of `arch` from the images folder."""
    return load_profile_file(profile_path(arch, root))


def load_profile_file(file: Path) -> Profile:
    """Load `file` (an arch.yaml), resolve its extends chain and validate the result."""
    layers = _resolve_chain(Path(file), shared_dir=Path(file).parent.parent / SHARED_DIR, seen=())
    merged: dict[str, Any] = {}
    for layer in layers:
        merged = _merge(merged, {k: v for k, v in layer.data.items() if k != "extends"})
    top = layers[-1]
    folder = top.file.parent.name
    in_images_tree = (top.file.parent.parent / SHARED_DIR).is_dir()
    if in_images_tree and merged.get("arch") not in (None, folder):
        found = merged.get("arch")
        raise ProfileError(
            [
                ProfileIssue(
                    top.shown,
                    "arch",
                    f"expected '{folder}' (the folder name), found {found!r}",
                    top.lines.get(("arch",)),
                )
            ]
        )
    try:
        return Profile.model_validate(merged)
    except ValidationError as exc:
        sources = [(layer.shown, layer.lines) for layer in layers]
        issues = [pydantic_issue(err, merged, sources) for err in exc.errors()]
        raise ProfileError(issues) from None


def _resolve_chain(file: Path, shared_dir: Path, seen: tuple[Path, ...]) -> list[_Layer]:
    if file in seen:
        chain = " -> ".join(display_path(p) for p in (*seen, file))
        raise ProfileError([ProfileIssue(display_path(file), "extends", f"cycle: {chain}")])
    layer = _read_layer(file)
    parents = layer.data.get("extends", [])
    if isinstance(parents, str):
        parents = [parents]
    if not isinstance(parents, list) or not all(isinstance(p, str) for p in parents):
        raise ProfileError(
            [
                ProfileIssue(
                    layer.shown,
                    "extends",
                    f"expected a fragment name or a list of names, found {describe_kind(parents)}",
                    layer.lines.get(("extends",)),
                )
            ]
        )
    layers: list[_Layer] = []
    for name in parents:
        parent = shared_dir / f"{name}.yaml"
        if not parent.is_file():
            available = sorted(p.stem for p in shared_dir.glob("*.yaml"))
            raise ProfileError(
                [
                    ProfileIssue(
                        layer.shown,
                        "extends",
                        f"no shared fragment '{name}' ({display_path(parent)}); available: "
                        f"{', '.join(available) or 'none'}",
                        layer.lines.get(("extends",)),
                    )
                ]
            )
        layers.extend(_resolve_chain(parent, shared_dir, (*seen, file)))
    layers.append(layer)
    return layers
