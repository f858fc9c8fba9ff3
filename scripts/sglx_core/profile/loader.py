"""Reading profiles: YAML layers of an extends chain, merged, then validated.

A profile may ``extends:`` shared fragments in `images/shared/<name>.yaml` (which may extend
others). Mappings merge key by key; lists and scalars in the later file replace earlier ones;
a key set to null removes what earlier files set.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from sglx_core.errors import SglxError
from sglx_core.paths import PROFILE_FILE, images_dir
from sglx_core.profile.bounded_yaml import BoundedSafeLoader, YamlBoundError
from sglx_core.profile.issues import (
    KeyPath,
    ProfileError,
    ProfileIssue,
    describe_kind,
    describe_value,
    dotted,
    pydantic_issue,
)
from sglx_core.profile.schema import Profile

SHARED_DIR = "shared"
MAX_PROFILE_BYTES = 1024 * 1024
"""Largest profile or fragment read (the shipped ones are under 10 KiB)."""
MAX_CHAIN_FILES = 32
"""Most files one profile's extends chain may load (a fragment reached twice counts twice)."""
# Arch and fragment names become path parts: no separators, no dots, nothing hidden.
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
NAME_RULE = "lowercase letters, digits, '-' and '_', starting with a letter or digit"
# A newline, tab, escape or other C0 control, or DEL: no profile string may hold one.
CONTROL_CHARACTER = re.compile(r"[\x00-\x1f\x7f]")
CONTROL_HINT = (
    "remove it: a profile value is one line of printable text (in YAML, no block scalar "
    "(| or >) and no \\n, \\t or \\e escape in a quoted string)"
)


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
    text = _read_text(file, shown)
    loader = BoundedSafeLoader(text)
    try:
        node = loader.get_single_node()
        # Key lines first: constructing flattens YAML merge keys ("<<") into the nodes.
        lines = _key_lines(node, shown)
        data = None if node is None else loader.construct_document(node)
    except YamlBoundError as exc:
        raise ProfileError(
            [ProfileIssue(shown, "", exc.message, exc.line)], hint=exc.hint
        ) from None
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
    finally:
        loader.dispose()
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
    return _Layer(file=file, data=data, lines=lines)


def _read_text(file: Path, shown: str) -> str:
    """The file's text, refused past `MAX_PROFILE_BYTES` or when it is not UTF-8."""
    try:
        with file.open("rb") as handle:
            raw = handle.read(MAX_PROFILE_BYTES + 1)
    except FileNotFoundError:
        raise ProfileError([ProfileIssue(shown, "", "file not found")]) from None
    except OSError as exc:
        raise ProfileError([ProfileIssue(shown, "", f"cannot read: {exc.strerror}")]) from None
    if len(raw) > MAX_PROFILE_BYTES:
        raise ProfileError(
            [ProfileIssue(shown, "", f"larger than {MAX_PROFILE_BYTES // 1024} KiB")],
            hint="a profile is a few KiB of YAML; is this the right file?",
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ProfileError(
            [ProfileIssue(shown, "", f"not UTF-8 text (byte 0x{raw[exc.start]:02x})", line)],
            hint="save the file as UTF-8",
        ) from None


def _key_lines(node: yaml.Node | None, shown: str) -> dict[KeyPath, int]:
    """The line of every key path; duplicate keys are refused (YAML would keep the last)."""
    lines: dict[KeyPath, int] = {}
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
    return lines


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


def known_arches(root: Path | None = None) -> list[str]:
    root = images_dir() if root is None else root
    return sorted(p.parent.name for p in root.glob(f"*/{PROFILE_FILE}"))


def check_arch_name(arch: str) -> str:
    """`arch` when it is a plain name; an error otherwise (it becomes images/<arch>/)."""
    if not NAME_PATTERN.fullmatch(arch):
        raise SglxError(
            f"invalid arch name {arch!r}: an arch is a plain name ({NAME_RULE})",
            hint="e.g. cpu or gfx942; `sglx arch list` shows the known arches",
            code="usage",
        )
    return arch


def profile_path(arch: str, root: Path | None = None) -> Path:
    root = images_dir() if root is None else root
    path = root / check_arch_name(arch) / PROFILE_FILE
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
    layers: list[_Layer] = []
    _resolve_chain(Path(file), Path(file).parent.parent / SHARED_DIR, (), layers)
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
    control = _control_characters(merged, (), layers)
    if control:
        raise ProfileError(control, hint=CONTROL_HINT)
    try:
        return Profile.model_validate(merged)
    except ValidationError as exc:
        sources = [(layer.shown, layer.lines) for layer in layers]
        issues = [pydantic_issue(err, merged, sources) for err in exc.errors()]
        raise ProfileError(issues) from None


def _control_characters(data: Any, prefix: KeyPath, layers: Sequence[_Layer]) -> list[ProfileIssue]:
    """Every key and string of the merged profile that holds a control character."""
    issues: list[ProfileIssue] = []
    if isinstance(data, dict):
        for key, value in data.items():
            found = CONTROL_CHARACTER.search(key) if isinstance(key, str) else None
            if found:
                what = f"the key {key!r}"
                issues.append(_control_issue(what, found[0], prefix, (*prefix, key), layers))
            else:
                issues += _control_characters(value, (*prefix, key), layers)
    elif isinstance(data, list):
        for index, item in enumerate(data):
            issues += _control_characters(item, (*prefix, index), layers)
    elif isinstance(data, str):
        found = CONTROL_CHARACTER.search(data)
        if found:
            issues.append(_control_issue(describe_value(data), found[0], prefix, prefix, layers))
    return issues


def _control_issue(
    what: str, char: str, key_path: KeyPath, at: KeyPath, layers: Sequence[_Layer]
) -> ProfileIssue:
    """The issue for `what` (at key path `at`), in the latest file that sets it."""
    message = (
        f"{what} holds the control character {char!r}: profile values reach systemd units, "
        "environment files and commands on the hosts, where it would start a new line"
    )
    for depth in range(len(at), -1, -1):
        for layer in reversed(layers):
            line = layer.lines.get(at[:depth])
            if line is not None:
                return ProfileIssue(layer.shown, dotted(key_path), message, line)
    return ProfileIssue(layers[-1].shown, dotted(key_path), message)


def _resolve_chain(
    file: Path, shared_dir: Path, seen: tuple[Path, ...], layers: list[_Layer]
) -> None:
    """Append `file`'s layers to `layers`, parents first."""
    if file in seen:
        chain = " -> ".join(display_path(p) for p in (*seen, file))
        raise ProfileError([ProfileIssue(display_path(file), "extends", f"cycle: {chain}")])
    layer = _read_layer(file)
    parents = layer.data.get("extends", [])
    if isinstance(parents, str):
        parents = [parents]
    line = layer.lines.get(("extends",))
    if not isinstance(parents, list) or not all(isinstance(p, str) for p in parents):
        found = describe_kind(parents)
        raise ProfileError(
            [
                ProfileIssue(
                    layer.shown,
                    "extends",
                    f"expected a fragment name or a list of names, found {found}",
                    line,
                )
            ]
        )
    for name in parents:
        parent = _fragment_path(name, shared_dir, layer, line)
        if len(layers) + len(seen) + 2 > MAX_CHAIN_FILES:  # + this file and its parent
            raise ProfileError(
                [
                    ProfileIssue(
                        layer.shown,
                        "extends",
                        f"the extends chain loads more than {MAX_CHAIN_FILES} files",
                        line,
                    )
                ],
                hint="extend fewer fragments; a fragment may itself extend the ones it needs",
            )
        _resolve_chain(parent, shared_dir, (*seen, file), layers)
    layers.append(layer)


def _fragment_path(name: str, shared_dir: Path, layer: _Layer, line: int | None) -> Path:
    """images/shared/<name>.yaml, for a plain name of a fragment that exists there."""
    if not NAME_PATTERN.fullmatch(name):
        raise ProfileError(
            [
                ProfileIssue(
                    layer.shown,
                    "extends",
                    f"invalid fragment name {name!r}: a fragment is named by the stem of a file "
                    f"in {display_path(shared_dir)}/ ({NAME_RULE})",
                    line,
                )
            ],
            hint="e.g. `extends: [base, rocm]` for shared/base.yaml and shared/rocm.yaml",
        )
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
                    line,
                )
            ]
        )
    if not parent.resolve().is_relative_to(shared_dir.resolve()):
        raise ProfileError(
            [
                ProfileIssue(
                    layer.shown,
                    "extends",
                    f"fragment '{name}' ({display_path(parent)}) is a link to "
                    f"{parent.resolve()}, outside {display_path(shared_dir)}/",
                    line,
                )
            ],
            hint="copy the fragment into the shared folder instead of linking to it",
        )
    return parent
