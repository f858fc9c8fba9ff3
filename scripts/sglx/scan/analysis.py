"""One scan: walk a tree inside a root, resolve every ELF file's closure, apply the rules.

The outcome is a `ScanReport` (plain data). Turning reports into a `Result` for people and
--json is `sglx.scan.result`'s job; getting a root out of an image or an archive is
`sglx.scan.image`'s and `sglx.scan.archive`'s.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sglx.scan.elf import BAD_HEADERS, TRUNCATED, ElfInfo, ElfKind, FileProblem
from sglx.scan.inventory import take_inventory
from sglx.scan.loader import BROKEN, HOST, MISSING, Closure, ElfCache, Loader
from sglx.scan.rules import (
    LOADED_FIRST,
    OPTIONAL_FILES,
    Rule,
    Rules,
    Violation,
    check_presence,
    check_runtime,
)
from sglx_core.rootfs import RootFS

DEFAULT_KIND = ElfKind(64, True, "EM_X86_64")


@dataclass(frozen=True)
class Target:
    """What to scan: `subtrees` (virtual paths) of the tree at `root`, as a process there sees it.

    `image_rules` says whether the whole-image rules (require, dlopen, data_files) apply: they do
    for an image or a root, not for a wheelhouse laid over one.
    """

    kind: str  # "tree", "image", "image_archive", "wheelhouse"
    label: str  # what the user named: a path, an image ref, an archive
    root: Path
    subtrees: tuple[str, ...] = ("/",)
    ld_library_path: tuple[str, ...] = ()
    env_source: str = "none"  # where LD_LIBRARY_PATH came from
    image_rules: bool = True
    notes: tuple[str, ...] = ()
    # Regular files unpacked as names only (layers.RootWriter), by canonical virtual dir.
    placeholders: Mapping[str, frozenset[str]] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class Unresolved:
    file: str  # the object whose DT_NEEDED (or PT_INTERP) is not found
    needed: str
    searched: tuple[str, ...]
    roots: tuple[str, ...]  # scanned files whose load fails because of it
    interpreter: bool = False
    # Scanned files of that name (file name or DT_SONAME) and ELF kind outside the search path:
    # the name resolves only in a process that loaded one of them first (torch before
    # torchvision).
    elsewhere: tuple[str, ...] = ()
    # The file the loader ends at but cannot use (cut short, unreadable), and what is wrong.
    broken: str | None = None
    problem: FileProblem | None = None


@dataclass(frozen=True)
class Accepted:
    """An unresolved dependency the arch profile accepts: reported, not a finding."""

    unresolved: Unresolved
    rule: str  # the scan key that accepts it: OPTIONAL_FILES or LOADED_FIRST
    pattern: str
    reason: str


@dataclass(frozen=True)
class HostUse:
    soname: str
    rule: str
    reason: str
    needed_by: tuple[str, ...]


@dataclass
class ScanReport:
    """What one scan found; `sglx.scan.result` turns it into tables, findings and JSON."""

    target: Target
    arch: str | None
    files: int = 0
    elf_files: int = 0
    kinds: dict[str, int] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)  # ELF headers unreadable: listed
    damaged: dict[str, FileProblem] = field(default_factory=dict)  # cut short, unreadable
    dependencies: int = 0  # distinct (file, needed name) pairs checked
    unresolved: list[Unresolved] = field(default_factory=list)
    accepted: list[Accepted] = field(default_factory=list)
    host_provided: list[HostUse] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    search: dict[str, list[str]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    closures: list[Closure] | None = None  # kept only when asked (benchmarks, tests)
    # Every readable ELF file: the SBOM lists those no package owns.
    elf_paths: tuple[str, ...] = ()

    @property
    def unresolved_pairs(self) -> int:
        return len(self.unresolved)

    @property
    def accepted_pairs(self) -> int:
        return len(self.accepted)

    @property
    def host_provided_pairs(self) -> int:
        return sum(len(use.needed_by) for use in self.host_provided)

    @property
    def resolved(self) -> int:
        return (
            self.dependencies
            - self.unresolved_pairs
            - self.accepted_pairs
            - self.host_provided_pairs
        )


def analyze(
    target: Target,
    rules: Rules,
    *,
    jobs: int,
    progress: Callable[[str], None],
    keep_closures: bool = False,
) -> ScanReport:
    """Scan one target; never runs any of its files."""
    rootfs = RootFS(target.root, target.placeholders)
    report = ScanReport(target=target, arch=rules.arch)
    progress(f"scanning {target.label}")
    inventory = take_inventory(rootfs, target.subtrees, jobs=jobs, progress=progress)
    report.files = inventory.files
    cut = {path for path, problem in inventory.damaged.items() if problem.kind == TRUNCATED}
    report.elf_files = len(inventory.elves.keys() | inventory.unreadable.keys() | cut)
    report.unreadable = dict(sorted(inventory.unreadable.items()))
    report.damaged = dict(sorted(inventory.damaged.items()))
    report.kinds = dict(Counter(info.kind.describe() for info in inventory.elves.values()))
    report.elf_paths = tuple(sorted(inventory.elves))
    report.seconds = {"walk": inventory.seconds_walk, "read": inventory.seconds_read}

    elves = ElfCache(rootfs)
    for path, info in inventory.elves.items():
        elves.add(path, info)
    for path, reason in inventory.unreadable.items():
        elves.add(path, None, FileProblem(BAD_HEADERS, reason))
    for path, problem in inventory.damaged.items():
        elves.add(path, inventory.elves.get(path), problem)
    loader = Loader(
        rootfs,
        elves,
        ld_library_path=target.ld_library_path,
        host_provided=lambda name: rules.host_provides(name) is not None,
    )
    started = time.monotonic()
    roots = [path for path, info in inventory.elves.items() if info.dynamic and info.loadable]
    progress(f"{report.elf_files} ELF files; resolving {len(roots)} dependency closures")
    closures = _resolve_all(loader, roots, progress)
    report.seconds["resolve"] = time.monotonic() - started
    _collect(report, closures, rules, _name_index(inventory.elves))
    _accept(report, rules, rootfs)
    if keep_closures:
        report.closures = closures

    started = time.monotonic()
    kind = _main_kind(inventory.elves)
    defaults = loader.defaults(kind)
    report.search = {
        "ld_library_path": list(loader.ld_library_path),
        "ld_so_conf": list(loader.conf_dirs),
        "system": list(defaults.system_dirs),
    }
    report.violations = _check_rules(target, rules, loader, kind, inventory.elves, closures)
    report.seconds["rules"] = time.monotonic() - started
    return report


def _check_rules(
    target: Target,
    rules: Rules,
    loader: Loader,
    kind: ElfKind,
    scanned: dict[str, ElfInfo],
    closures: Sequence[Closure],
) -> list[Violation]:
    """The profile's rules over the files scanned and everything they load."""
    objects = dict(scanned)
    needed: dict[str, set[str]] = {}
    for closure in closures:
        for path in closure.objects:
            loaded = loader.elves.get(path)
            if loaded is not None:
                objects.setdefault(path, loaded)
        for res in closure.resolutions:
            if not res.interpreter:
                needed.setdefault(res.name, set()).add(res.requester)
    if not target.image_rules:  # a wheelhouse: the image rules are checked on the image
        return check_presence(Rules(arch=rules.arch, forbidden=rules.forbidden), objects, needed)
    violations = check_presence(rules, objects, needed)
    return violations + check_runtime(rules, loader, kind, objects)


def _resolve_all(
    loader: Loader, roots: Sequence[str], progress: Callable[[str], None]
) -> list[Closure]:
    closures = []
    last = time.monotonic()
    for done, root in enumerate(roots, 1):
        closures.append(loader.closure(root))
        if time.monotonic() - last > 2.0:
            last = time.monotonic()
            progress(f"resolving: {done}/{len(roots)} files")
    return closures


def _name_index(elves: dict[str, ElfInfo]) -> dict[str, list[tuple[str, ElfKind]]]:
    """File name and DT_SONAME -> the loadable ELF files that answer to it, with their kind."""
    index: dict[str, list[tuple[str, ElfKind]]] = {}
    for path, info in elves.items():
        if not info.loadable:
            continue
        base = path.rpartition("/")[2]
        index.setdefault(base, []).append((path, info.kind))
        if info.soname and info.soname != base:
            index.setdefault(info.soname, []).append((path, info.kind))
    return index


def _collect(
    report: ScanReport,
    closures: Sequence[Closure],
    rules: Rules,
    names: dict[str, list[tuple[str, ElfKind]]],
) -> None:
    """Fold the closures into distinct (file, needed name) pairs and their worst outcome."""
    pairs: set[tuple[str, str]] = set()
    missing: dict[tuple[str, str], tuple[tuple[str, ...], list[str], bool, ElfKind]] = {}
    broken: dict[tuple[str, str], tuple[str | None, FileProblem | None]] = {}
    hosted: dict[str, set[str]] = {}
    for closure in closures:
        for res in closure.resolutions:
            key = (res.requester, res.name)
            pairs.add(key)
            if res.how in (MISSING, BROKEN):
                # Every object of a process has the main object's kind (the loader skips others).
                entry = missing.setdefault(key, (res.searched, [], res.interpreter, closure.kind))
                entry[1].append(closure.root)
                if res.how == BROKEN:
                    broken.setdefault(key, (res.target, res.problem))
            elif res.how == HOST:
                hosted.setdefault(res.name, set()).add(res.requester)
    report.dependencies = len(pairs)
    report.unresolved = [
        Unresolved(
            file,
            name,
            searched,
            tuple(dict.fromkeys(roots)),
            interpreter,
            () if interpreter else tuple(sorted(p for p, k in names.get(name, ()) if k == kind)),
            *broken.get((file, name), (None, None)),
        )
        for (file, name), (searched, roots, interpreter, kind) in sorted(missing.items())
    ]
    for name, requesters in sorted(hosted.items()):
        rule = rules.host_provides(name)
        if rule is not None:  # always: the loader records HOST only for names a rule matches
            use = HostUse(name, rule.pattern, rule.reason, tuple(sorted(requesters)))
            report.host_provided.append(use)


def _accept(report: ScanReport, rules: Rules, rootfs: RootFS) -> None:
    """Move the unresolved dependencies the profile accepts from `unresolved` to `accepted`.

    optional_files first: the needing file and every scanned file whose load the dependency
    breaks must match (an ordinary library that links an optional plugin still fails to load).
    Then loaded_first: the name matches and a file of that name and kind was scanned elsewhere.
    A missing program interpreter is never accepted.
    """
    if not (rules.optional_files or rules.loaded_first) or not report.unresolved:
        return
    optional = rules.optional_file_rules(rootfs) if rules.optional_files else {}
    kept: list[Unresolved] = []
    for item in report.unresolved:
        accepted = _acceptance(item, rules, optional)
        if accepted is None:
            kept.append(item)
        else:
            report.accepted.append(accepted)
    report.unresolved = kept


def _acceptance(item: Unresolved, rules: Rules, optional: dict[str, Rule]) -> Accepted | None:
    if item.interpreter or item.broken is not None:
        return None  # a file that is there but damaged is never an accepted absence
    if item.file in optional and all(root in optional for root in item.roots):
        rule = optional[item.file]
        return Accepted(item, OPTIONAL_FILES, rule.pattern, rule.reason)
    first = rules.loaded_first_rule(item.needed) if item.elsewhere else None
    if first is not None:
        return Accepted(item, LOADED_FIRST, first.pattern, first.reason)
    return None


def _main_kind(elves: dict[str, ElfInfo]) -> ElfKind:
    """The kind of most programs in the tree (else of most files): what dlopen rules check."""
    programs = Counter(info.kind for info in elves.values() if info.interpreter)
    anything = Counter(info.kind for info in elves.values() if info.loadable)
    for counter in (programs, anything):
        if counter:
            return counter.most_common(1)[0][0]
    return DEFAULT_KIND
