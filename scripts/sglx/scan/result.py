"""Turn scan reports into a `Result`: a summary table, the unresolved dependencies by file, the
ones the arch profile accepts (by rule), the host-provided libraries, findings, and the full
lists under `data` for --json.

Human output is truncated (the first `SHOWN` rows of long lists); --json has everything.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sglx.scan.analysis import Accepted, ScanReport, Unresolved
from sglx.scan.elf import TRUNCATED, FileProblem
from sglx.scan.rules import UNRESOLVED
from sglx_core.report import Finding, Result, Table

DAMAGED_ELF = "damaged_elf"
UNREADABLE_FILE = "unreadable_file"
DAMAGED_DEPENDENCY = "damaged_dependency"

SHOWN = 20
SEARCHED_SHOWN = 4


def build_result(reports: Sequence[ScanReport], source: Mapping[str, Any]) -> Result:
    many = len(reports) > 1

    def where(report: ScanReport, path: str | None) -> str | None:
        if path is None or not many:
            return path
        return f"{report.target.label}:{path}"

    summary = Table(
        columns=(
            "scan",
            "files",
            "ELF files",
            "dependencies",
            "resolved",
            "unresolved",
            "accepted",
            "host-provided",
            "rule violations",
            "seconds",
        ),
        rows=tuple(
            (
                f"{r.target.kind} {r.target.label}",
                str(r.files),
                str(r.elf_files),
                str(r.dependencies),
                str(r.resolved),
                str(r.unresolved_pairs),
                str(r.accepted_pairs),
                str(r.host_provided_pairs),
                str(len(r.violations)),
                f"{sum(r.seconds.values()):.1f}",
            )
            for r in reports
        ),
        title="summary",
    )
    tables = [summary]
    lines: list[str] = []

    unresolved = [(r, u) for r in reports for u in r.unresolved]
    if unresolved:
        rows = tuple(
            (
                where(r, u.file) or "",
                ("interpreter " if u.interpreter else "")
                + u.needed
                + ("" if u.broken is None else " (there, but damaged)"),
            )
            for r, u in unresolved[:SHOWN]
        )
        tables.append(Table(("file", "needs"), rows, title="unresolved dependencies by file"))
        if len(unresolved) > SHOWN:
            lines.append(
                f"... and {len(unresolved) - SHOWN} more unresolved dependencies (--json lists all)"
            )
    accepted = _accepted_table(reports, where)
    if accepted is not None:
        tables.append(accepted)
    hosted = [(r, h) for r in reports for h in r.host_provided]
    if hosted:
        tables.append(
            Table(
                ("soname", "rule", "needed by", "for example"),
                tuple(
                    (h.soname, h.rule, f"{len(h.needed_by)} files", where(r, h.needed_by[0]) or "")
                    for r, h in hosted
                ),
                title="host-provided libraries used (allowed by the arch profile)",
            )
        )
    for report in reports:
        lines.extend(_context_lines(report, many))

    findings: list[Finding] = []
    for report in reports:
        findings.extend(
            _damaged_finding(path, problem, where(report, path))
            for path, problem in report.damaged.items()
        )
        findings.extend(_unresolved_findings(report, where))
        findings.extend(
            Finding(code=v.code, message=v.message, path=where(report, v.path), hint=v.hint)
            for v in report.violations
        )
    return Result(
        command=("scan",),
        data={
            "source": dict(source),
            "scans": [_report_json(r) for r in reports],
            "summary": _totals(reports),
        },
        tables=tuple(tables),
        lines=tuple(lines),
        findings=tuple(findings),
    )


def _accepted_table(reports: Sequence[ScanReport], where: Any) -> Table | None:
    """Accepted dependencies by rule: how many each accepts, and one example (--json has all)."""
    groups: dict[tuple[str, str], list[tuple[ScanReport, Accepted]]] = {}
    for report in reports:
        for item in report.accepted:
            groups.setdefault((item.rule, item.pattern), []).append((report, item))
    if not groups:
        return None
    rows = []
    for (rule, pattern), items in sorted(groups.items()):
        report, first = items[0]
        example = f"{where(report, first.unresolved.file)} needs {first.unresolved.needed}"
        rows.append((f"{rule} {pattern}", str(len(items)), example))
    return Table(
        ("rule", "dependencies", "for example"),
        tuple(rows),
        title="unresolved dependencies accepted by the arch profile (--json gives each reason)",
    )


def _context_lines(report: ScanReport, many: bool) -> list[str]:
    target = report.target
    prefix = f"{target.label}: " if many else ""
    ldlp = ":".join(target.ld_library_path) or "unset"
    lines = [
        f"{prefix}root {target.root} (paths are inside it); arch rules: "
        f"{report.arch or 'none (only unresolved dependencies are checked)'}; "
        f"LD_LIBRARY_PATH {ldlp} (from {target.env_source})"
    ]
    lines.extend(f"{prefix}{note}" for note in target.notes)
    if report.kinds and len(report.kinds) > 1:
        kinds = ", ".join(f"{n} {k}" for k, n in sorted(report.kinds.items()))
        lines.append(f"{prefix}ELF kinds: {kinds}")
    if report.unreadable:
        example = next(iter(report.unreadable))
        lines.append(
            f"{prefix}{len(report.unreadable)} ELF files have unreadable headers and were not "
            f"resolved (e.g. {example}: {report.unreadable[example]})"
        )
    return lines


def _damaged_finding(path: str, problem: FileProblem, shown: str | None) -> Finding:
    """A file the scan could not check: cut short, or unreadable to the scanning user."""
    if problem.kind == TRUNCATED:
        return Finding(
            code=DAMAGED_ELF,
            message=f"ELF file {problem.reason}",
            path=shown,
            hint=f"re-copy or reinstall {path} (an interrupted copy, download or extraction "
            "leaves files cut short), then scan again",
        )
    return Finding(
        code=UNREADABLE_FILE,
        message=problem.reason,
        path=shown,
        hint="scan as a user who can read every file of the tree (root, as the image's "
        "processes usually run) or fix its mode; on an I/O error, re-copy or reinstall it",
    )


def _broken_finding(item: Unresolved, more: str, path: str | None) -> Finding:
    problem = item.problem
    what = "cut short" if problem is not None and problem.kind == TRUNCATED else "unreadable"
    reason = problem.reason if problem is not None else what
    if item.interpreter:
        message = f"program interpreter {item.needed} is {what} ({reason}): this program cannot "
        message += f"start{more}"
    else:
        message = (
            f"needs {item.needed}; the file the loader finds for it, {item.broken}, is {what} "
            f"({reason}): loading fails{more}"
        )
    return Finding(
        code=DAMAGED_DEPENDENCY,
        message=message,
        path=path,
        hint=f"re-copy or reinstall {item.broken}, then scan again; it is not missing, so no "
        "scan rule accepts it",
    )


# needed name, directories searched, interpreter?, found elsewhere, broken file
_GroupKey = tuple[str, tuple[str, ...], bool, tuple[str, ...], str | None]


def _unresolved_findings(report: ScanReport, where: Any) -> list[Finding]:
    """One finding per missing name and search path; the full list is in data."""
    groups: dict[_GroupKey, list[Unresolved]] = {}
    for item in report.unresolved:
        key = (item.needed, item.searched, item.interpreter, item.elsewhere, item.broken)
        groups.setdefault(key, []).append(item)
    findings = []
    for (name, searched, interpreter, elsewhere, broken), items in groups.items():
        files = sorted({item.file for item in items})
        more = f" (and by {len(files) - 1} more files)" if len(files) > 1 else ""
        if broken is not None:
            findings.append(_broken_finding(items[0], more, where(report, files[0])))
            continue
        if interpreter:
            message = f"program interpreter {name} not found: this program cannot start{more}"
            hint = "the image lacks its C library's loader; build on the arch's base image"
        else:
            message = f"needs {name}, which is not found{more}"
            rules = f"images/{report.arch}/arch.yaml" if report.arch else "the arch profile"
            if elsewhere:
                hint = (
                    f"searched {_short_dirs(searched, 8)}; a file of that name is at "
                    f"{_short_dirs(elsewhere, 2)}, outside the search path: it is found only if "
                    "it is loaded first (e.g. its Python package imported before this one); "
                    f"if the process always loads it first, list it under scan.loaded_first in "
                    f"{rules}, otherwise fix the RUNPATH of the file that needs it"
                )
            else:
                hint = (
                    f"searched {_short_dirs(searched, 8)}; ship the library in the image, or "
                    f"list it under scan.host_provided in {rules} if the host mounts it at run "
                    "time (or the file that needs it under scan.optional_files if it is a "
                    "plugin loaded only when that library is configured)"
                )
        path = where(report, files[0])
        findings.append(Finding(code=UNRESOLVED, message=message, path=path, hint=hint))
    return findings


def _short_dirs(dirs: Sequence[str], shown: int = SEARCHED_SHOWN) -> str:
    if len(dirs) <= shown:
        return ", ".join(dirs) or "-"
    return ", ".join(dirs[:shown]) + f", ... ({len(dirs)} dirs)"


def _report_json(report: ScanReport) -> dict[str, Any]:
    target = report.target
    return {
        "kind": target.kind,
        "label": target.label,
        "root": str(target.root),
        "subtrees": list(target.subtrees),
        "arch": report.arch,
        "ld_library_path_from": target.env_source,
        "search": report.search,
        "notes": list(target.notes),
        "files": report.files,
        "elf_files": report.elf_files,
        "elf_kinds": report.kinds,
        "unreadable_elf": [{"path": p, "reason": r} for p, r in report.unreadable.items()],
        "damaged_files": [
            {"path": p, "problem": d.kind, "reason": d.reason} for p, d in report.damaged.items()
        ],
        "dependencies": {
            "checked": report.dependencies,
            "resolved": report.resolved,
            "unresolved": report.unresolved_pairs,
            "accepted": report.accepted_pairs,
            "host_provided": report.host_provided_pairs,
        },
        "unresolved": [
            {
                "file": u.file,
                "needed": u.needed,
                "interpreter": u.interpreter,
                "searched": list(u.searched),
                "roots": list(u.roots),
                "elsewhere": list(u.elsewhere),
                "broken": u.broken,
                "problem": None if u.problem is None else u.problem.kind,
            }
            for u in report.unresolved
        ],
        "accepted": [
            {
                "file": a.unresolved.file,
                "needed": a.unresolved.needed,
                "rule": a.rule,
                "pattern": a.pattern,
                "reason": a.reason,
                "searched": list(a.unresolved.searched),
                "roots": list(a.unresolved.roots),
                "elsewhere": list(a.unresolved.elsewhere),
            }
            for a in report.accepted
        ],
        "host_provided": [
            {"soname": h.soname, "rule": h.rule, "reason": h.reason, "needed_by": list(h.needed_by)}
            for h in report.host_provided
        ],
        "violations": [
            {"code": v.code, "message": v.message, "path": v.path} for v in report.violations
        ],
        "seconds": {k: round(v, 3) for k, v in report.seconds.items()},
    }


def _totals(reports: Sequence[ScanReport]) -> dict[str, int]:
    return {
        "files": sum(r.files for r in reports),
        "elf_files": sum(r.elf_files for r in reports),
        "damaged_files": sum(len(r.damaged) for r in reports),
        "dependencies": sum(r.dependencies for r in reports),
        "resolved": sum(r.resolved for r in reports),
        "unresolved": sum(r.unresolved_pairs for r in reports),
        "accepted": sum(r.accepted_pairs for r in reports),
        "host_provided": sum(r.host_provided_pairs for r in reports),
        "rule_violations": sum(len(r.violations) for r in reports),
    }
