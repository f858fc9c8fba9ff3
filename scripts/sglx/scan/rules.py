"""The arch profile's scan rules (`scan:` in images/<arch>/arch.yaml), checked against a scan.

- `require`: sonames that must be present inside the image (an ELF file whose DT_SONAME or file
  name matches); a missing one is `required_missing`.
- `host_provided`: sonames the host injects at run time; a needed name that matches and is not in
  the image is reported as host-provided instead of unresolved.
- `forbidden`: sonames that must not appear, neither as a file nor as a needed name:
  `forbidden_soname`.
- `dlopen`: libraries loaded by name at run time, invisible in DT_NEEDED; each must be found in
  the default library search path (LD_LIBRARY_PATH, ld.so.conf directories, system
  directories): `dlopen_missing`.
- `data_files`: path globs from the image root that must match something: `data_file_missing`.
- `optional_files`: path globs from the image root of plugins loaded only when their optional
  dependency is configured (NVSHMEM's MPI transport, cuFile's RDMA plugin); an unresolved
  dependency of such a file is accepted, not a finding, when every scanned file whose load it
  breaks is optional too.
- `loaded_first`: sonames accepted when unresolved if a scanned ELF file of that name and kind
  exists elsewhere in the root: the process loads it before the library that needs it (`import
  torch` maps libc10.so before torchvision's extensions need it). Without such a file it stays
  a finding.

Soname patterns are fnmatch globs matched case-sensitively against full, versioned sonames
(`librocblas.so.*`, not `librocblas.so`), as auditwheel matches its excludes. Path globs match
per component, links followed inside the root (`RootFS.glob`).
"""

from __future__ import annotations

import fnmatch
import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sglx.scan.elf import ElfInfo, ElfKind
from sglx.scan.loader import Loader, SearchDir
from sglx_core.rootfs import Kind, RootFS

if TYPE_CHECKING:  # pydantic takes 0.15 s to import; a scan without --arch never needs it
    from sglx_core.profile import Profile

UNRESOLVED = "unresolved"
REQUIRED_MISSING = "required_missing"
FORBIDDEN_SONAME = "forbidden_soname"
DLOPEN_MISSING = "dlopen_missing"
DATA_FILE_MISSING = "data_file_missing"
# Why an unresolved dependency is accepted: the profile key whose rule accepts it.
OPTIONAL_FILES = "optional_files"
LOADED_FIRST = "loaded_first"


@dataclass(frozen=True)
class Rule:
    pattern: str
    reason: str

    def matches(self, name: str) -> bool:
        return fnmatch.fnmatchcase(name, self.pattern)


@dataclass(frozen=True)
class Violation:
    """A broken rule: becomes a finding (exit 1)."""

    code: str
    message: str
    path: str | None
    hint: str


@dataclass(frozen=True)
class Rules:
    """The scan rules of one arch (or none: only unresolved dependencies are findings)."""

    arch: str | None = None
    require: tuple[Rule, ...] = ()
    host_provided: tuple[Rule, ...] = ()
    forbidden: tuple[Rule, ...] = ()
    dlopen: tuple[Rule, ...] = ()
    data_files: tuple[Rule, ...] = ()
    optional_files: tuple[Rule, ...] = ()
    loaded_first: tuple[Rule, ...] = ()
    ld_library_path: str | None = None  # the profile's env, what its images are built with

    @classmethod
    def from_profile(cls, profile: Profile) -> Rules:
        scan = profile.scan

        def rules(table: Mapping[str, str]) -> tuple[Rule, ...]:
            return tuple(Rule(pattern, reason) for pattern, reason in table.items())

        return cls(
            arch=profile.arch,
            require=rules(scan.require),
            host_provided=rules(scan.host_provided),
            forbidden=rules(scan.forbidden),
            dlopen=rules(scan.dlopen),
            data_files=rules(scan.data_files),
            optional_files=rules(scan.optional_files),
            loaded_first=rules(scan.loaded_first),
            ld_library_path=profile.env.get("LD_LIBRARY_PATH"),
        )

    @property
    def profile_file(self) -> str:
        return f"images/{self.arch}/arch.yaml" if self.arch else "the arch profile"

    def host_provides(self, name: str) -> Rule | None:
        """The host_provided rule `name` matches, unless a require rule claims it."""
        if any(rule.matches(name) for rule in self.require):
            return None
        return next((rule for rule in self.host_provided if rule.matches(name)), None)

    def loaded_first_rule(self, name: str) -> Rule | None:
        """The loaded_first rule soname `name` matches, if any."""
        return next((rule for rule in self.loaded_first if rule.matches(name)), None)

    def optional_file_rules(self, rootfs: RootFS) -> dict[str, Rule]:
        """Canonical path of each regular file an optional_files glob matches -> its rule."""
        out: dict[str, Rule] = {}
        for rule in self.optional_files:
            for path in rootfs.glob(rule.pattern):
                canonical = rootfs.resolve(path)
                if canonical is not None and rootfs.kind(canonical) is Kind.FILE:
                    out.setdefault(canonical, rule)
        return out


def _names(path: str, info: ElfInfo) -> tuple[str, ...]:
    """What a library answers to: its file name and its DT_SONAME."""
    base = posixpath.basename(path)
    if info.soname is None or info.soname == base:
        return (base,)
    return (base, info.soname)


def check_presence(
    rules: Rules, objects: Mapping[str, ElfInfo], needed: Mapping[str, Iterable[str]]
) -> list[Violation]:
    """`require` and `forbidden`, over the ELF files seen and the names they need."""
    out: list[Violation] = []
    for rule in rules.require:
        if not any(rule.matches(n) for path, info in objects.items() for n in _names(path, info)):
            out.append(
                Violation(
                    REQUIRED_MISSING,
                    f"no library matching '{rule.pattern}' in the image ({rule.reason})",
                    None,
                    f"the image must ship it (scan.require in {rules.profile_file}); check "
                    "that the base image is the arch's vendor base and the build kept it",
                )
            )
    for rule in rules.forbidden:
        for path, info in sorted(objects.items()):
            if any(rule.matches(n) for n in _names(path, info)):
                out.append(
                    Violation(
                        FORBIDDEN_SONAME,
                        f"forbidden library '{rule.pattern}' present ({rule.reason})",
                        path,
                        f"remove the package that brings it (scan.forbidden in "
                        f"{rules.profile_file})",
                    )
                )
        for name, requesters in sorted(needed.items()):
            if rule.matches(name):
                for requester in sorted(set(requesters)):
                    out.append(
                        Violation(
                            FORBIDDEN_SONAME,
                            f"needs forbidden library {name} ({rule.reason})",
                            requester,
                            "this file was built for another accelerator stack; install the "
                            f"build for {rules.arch or 'this arch'} (scan.forbidden in "
                            f"{rules.profile_file})",
                        )
                    )
    return out


def check_runtime(
    rules: Rules, loader: Loader, kind: ElfKind, objects: Mapping[str, ElfInfo]
) -> list[Violation]:
    """`dlopen` (found in the default search path) and `data_files` (globs match)."""
    rootfs = loader.rootfs
    out: list[Violation] = []
    search = loader.default_search(kind)
    for rule in rules.dlopen:
        if _in_search_path(rule, loader, search, kind):
            continue
        elsewhere = sorted(
            path
            for path, info in objects.items()
            if any(rule.matches(n) for n in _names(path, info))
        )
        where = f"; found outside it at {', '.join(elsewhere[:3])}" if elsewhere else ""
        dirs = ", ".join(dict.fromkeys(d.path for d in search))
        out.append(
            Violation(
                DLOPEN_MISSING,
                f"'{rule.pattern}' is not in the library search path ({rule.reason})",
                None,
                f"searched {dirs}{where}; ship it in a directory of /etc/ld.so.conf.d or "
                "LD_LIBRARY_PATH",
            )
        )
    for rule in rules.data_files:
        if not rootfs.glob(rule.pattern):
            out.append(
                Violation(
                    DATA_FILE_MISSING,
                    f"nothing matches {rule.pattern} ({rule.reason})",
                    rule.pattern,
                    f"the image must contain it (scan.data_files in {rules.profile_file})",
                )
            )
    return out


def _in_search_path(rule: Rule, loader: Loader, search: Iterable[SearchDir], kind: ElfKind) -> bool:
    """Whether a file matching `rule` in one of `search` is an ELF library of `kind`."""
    rootfs = loader.rootfs
    for directory in search:
        canonical = rootfs.resolve(directory.path)
        entries = None if canonical is None else rootfs.listing(canonical)
        for name in entries or ():
            if rule.matches(name):
                found = rootfs.find_file(directory.path, name)
                info = None if found is None else loader.elves.get(found)
                if info is not None and info.kind == kind:
                    return True
    return False
