"""The reference docs must not drift from the code they describe: docs/reference/profile.md is
generated from the schema, and docs/reference/preflight.md names every check and failure class."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

from sglx_core.profile.reference import render_markdown, schema_rows


def test_profile_reference_matches_the_schema(repo: Path) -> None:
    committed = (repo / "docs" / "reference" / "profile.md").read_text()
    assert committed == render_markdown(), "stale reference: run `make docs` and commit"


def test_every_schema_key_is_documented() -> None:
    undocumented = [r.path for r in schema_rows() if not r.description]
    assert undocumented == []


# docs/reference/preflight.md names every check a report can carry. The names are collected
# from the code, so a new check fails here until the page documents it.
PREFLIGHT_DOC = Path(__file__).resolve().parents[3] / "docs" / "reference" / "preflight.md"
PREFLIGHT_CODE = Path(__file__).resolve().parents[3] / "runtime" / "sglx_runtime" / "preflight"
HOST_CHECKS = Path(__file__).resolve().parents[3] / "hostchecks"
_CHECK_CALLS = ("Check", "failed")


def host_check_names() -> list[str]:
    """`sglx hosts check` names a check after its test function, less `test_` (junit.py)."""
    names = []
    for path in sorted(HOST_CHECKS.glob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names += [
            node.name.removeprefix("test_")
            for node in tree.body
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
        ]
    return names


def _name_of(arg: ast.expr) -> str | None:
    """A literal check name as is; an f-string's literal head as its family ("device …")."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.JoinedStr) and isinstance(arg.values[0], ast.Constant):
        return str(arg.values[0].value).rstrip(" /") + " "
    return None


def preflight_check_names() -> tuple[set[str], list[str]]:
    """The names `sglx-preflight` reports, and the calls whose name could not be read.

    File checks: the first argument of each `Check(...)`/`failed(...)` in the preflight
    package, a literal, an f-string, or a local variable assigned one. Probe-child steps: the
    step registry (`steps.Kind`, named as `Step.name` shows them) and the modules it imports.
    `step.name` is the step registry's; a parameter passed on (`failed`'s own body) names
    nothing itself.
    """
    from sglx_runtime.preflight.child_checks import MODULES
    from sglx_runtime.preflight.steps import DIED, Kind, Step

    names: set[str] = set()
    unread: list[str] = []
    for path in sorted(PREFLIGHT_CODE.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for func in ast.walk(tree):
            if not isinstance(func, ast.FunctionDef):
                continue
            params = {a.arg for a in func.args.args + func.args.kwonlyargs}
            local = {
                target.id: node.value
                for node in ast.walk(func)
                if isinstance(node, ast.Assign)
                for target in node.targets
                if isinstance(target, ast.Name)
            }
            for call in ast.walk(func):
                if not (
                    isinstance(call, ast.Call)
                    and isinstance(call.func, ast.Name)
                    and call.func.id in _CHECK_CALLS
                    and call.args
                ):
                    continue
                arg = call.args[0]
                if isinstance(arg, ast.Name) and arg.id in params:
                    continue
                if isinstance(arg, ast.Attribute) and ast.unparse(arg) == "step.name":
                    continue
                if isinstance(arg, ast.Name) and arg.id in local:
                    arg = local[arg.id]
                name = _name_of(arg)
                if name is None:
                    unread.append(f"{path.name}:{call.lineno}: {ast.unparse(call.args[0])}")
                else:
                    names.add(name)
    assert set(DIED) == set(get_args(Kind)), "every step kind needs its class when the child dies"
    for kind in get_args(Kind):
        shown = Step(kind, "TARGET").name
        names.add(shown.replace("TARGET", "") if "TARGET" in shown else shown)
    names |= {f"module {module}" for module in MODULES}
    return names, unread


def _documented(name: str, doc: str) -> bool:
    """`name` in backticks; a family ("device ") as the start of a backticked name."""
    return f"`{name}`" in doc if not name.endswith(" ") else f"`{name}" in doc


def test_every_preflight_check_is_in_preflight_md() -> None:
    doc = PREFLIGHT_DOC.read_text(encoding="utf-8")
    names, unread = preflight_check_names()
    assert not unread, (
        "preflight checks whose name this test cannot read (give Check/failed a literal or "
        "f-string name, or a local variable assigned one):\n  " + "\n  ".join(unread)
    )
    assert {"profile", "arch", "device ", "server args", "init"} <= names  # the scan works
    missing = sorted(n for n in names if not _documented(n, doc))
    assert not missing, (
        f"sglx-preflight checks missing from {PREFLIGHT_DOC.name}: {missing}. Fix: add a row "
        "for each (what it checks, class, message, fix) to its table there"
    )


def test_every_host_check_is_in_preflight_md() -> None:
    doc = PREFLIGHT_DOC.read_text(encoding="utf-8")
    names = host_check_names()
    assert {"connection", "device_nodes", "group_runs_the_same"} <= set(names)
    missing = [n for n in names if f"| `{n}` |" not in doc]
    assert not missing, (
        f"host checks (hostchecks/test_*.py) missing from {PREFLIGHT_DOC.name}: {missing}. "
        "Fix: add a row for each (what it checks, message, fix) to the preflight or "
        "acceptance table there"
    )


def test_every_failure_class_is_in_preflight_md() -> None:
    from sglx_platform.failures import FailureClass

    doc = PREFLIGHT_DOC.read_text(encoding="utf-8")
    missing = [c.value for c in FailureClass if f"| `{c.value}` |" not in doc]
    assert not missing, f"failure classes missing from the table in {PREFLIGHT_DOC.name}: {missing}"
