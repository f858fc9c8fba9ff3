"""`sglx arch ...`: list, show and validate architecture profiles."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import yaml

from sglx_core.errors import SglxError
from sglx_core.profile import (
    PROFILE_FILE,
    ProfileError,
    images_dir,
    known_arches,
    load_profile,
    load_profile_file,
)
from sglx_core.profile.issues import DEFAULT_HINT
from sglx_core.profile.loader import display_path
from sglx_core.profile.reference import render_markdown, schema_rows
from sglx_core.report import Finding, Result, Table


def list_arches() -> Result:
    rows = []
    data = []
    for arch in known_arches():
        profile = load_profile(arch)
        rows.append(
            (
                arch,
                profile.platform.family,
                profile.support.level,
                profile.base.ref,
                profile.description,
            )
        )
        data.append(
            {
                "arch": arch,
                "family": profile.platform.family,
                "support": profile.support.level,
                "base": profile.base.ref,
                "description": profile.description,
            }
        )
    table = Table(("arch", "family", "support", "base image", "description"), tuple(rows))
    return Result(command=("arch", "list"), data={"arches": data}, tables=(table,))


def show_arch(arch: str) -> Result:
    profile = load_profile(arch)
    document = profile.to_json()
    text = yaml.safe_dump(document, sort_keys=False, default_flow_style=False, width=100)
    header = f"# {arch}: resolved profile ({display_path(images_dir() / arch / PROFILE_FILE)})"
    return Result(
        command=("arch", "show", arch),
        data={"profile": document},
        lines=(header, text.rstrip()),
    )


def validate_profiles(paths: Sequence[Path]) -> Result:
    """Validate profiles; every problem of every file is a finding (exit 1)."""
    files = list(_profile_files(paths))
    rows: list[tuple[str, ...]] = []
    findings: list[Finding] = []
    checked = []
    for file in files:
        try:
            profile = load_profile_file(file)
        except ProfileError as exc:
            # A specific hint (a bound, an encoding) helps; the generic one would repeat.
            hint = None if exc.hint == DEFAULT_HINT else exc.hint
            for issue in exc.issues:
                findings.append(
                    Finding(
                        "invalid_profile",
                        f"{issue.key_path or '(file)'}: {issue.message}",
                        path=issue.file if issue.line is None else f"{issue.file}:{issue.line}",
                        hint=hint,
                    )
                )
            rows.append((display_path(file), "invalid", f"{len(exc.issues)} problem(s)"))
            checked.append({"file": display_path(file), "valid": False})
            continue
        rows.append((display_path(file), "ok", profile.arch))
        checked.append({"file": display_path(file), "valid": True, "arch": profile.arch})
    return Result(
        command=("arch", "validate"),
        data={"profiles": checked},
        tables=(Table(("profile", "status", "detail"), tuple(rows)),),
        findings=tuple(findings),
    )


def _profile_files(paths: Sequence[Path]) -> list[Path]:
    if not paths:
        root = images_dir()
        return [root / arch / PROFILE_FILE for arch in known_arches(root)]
    files = []
    for path in paths:
        if path.is_dir():
            path = path / PROFILE_FILE
        if not path.is_file():
            raise SglxError(
                f"{path}: no such profile",
                hint=f"pass an {PROFILE_FILE} file or the folder that holds one",
                code="usage",
                path=str(path),
            )
        files.append(path)
    return files


def schema_reference() -> Result:
    keys = [
        {"key": r.path, "type": r.type, "default": r.default, "description": r.description}
        for r in schema_rows()
    ]
    return Result(
        command=("arch", "schema"), data={"keys": keys}, lines=(render_markdown().rstrip(),)
    )
