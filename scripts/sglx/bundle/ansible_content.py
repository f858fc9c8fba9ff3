"""The bundle's `ansible/` folder: what a site's control node needs to configure hosts, roll
out and check hosts with no network.

    ansible/                    the checkout's ansible/: ansible.cfg, the playbooks, roles/,
                                README.md, inventory/example/ (all of it, walked)
    ansible/inventory/example/group_vars/ARCH/sglx_profile.yml
                                the bundle arch's variables, rendered now (`sglx ansible vars`)
    ansible/host-checks/        the host-check suite: hostchecks's *.py and pytest.ini
    ansible/control-node.txt    bundles/locks/ansible.txt (kind "lock")
    ansible/wheels/             the wheels of that lock, from --control-wheels DIR only, and
                                sglx's own wheel, built now and pinned by its sha256 in
                                control-node.txt: `sglx hosts check` runs with the lock alone

`collect` reads and checks everything before the bundle's staging folder exists (a symlink, a
name a bundle cannot carry, too many files or bytes, a missing or altered wheel are refused
there, naming the path); `write` then copies it through the hashed-copy path, so every file is
in bundle.json and SHA256SUMS (kind "ansible", the lock "lock") and is checked by verify and
install.sh like any other. Caches are left out: `__pycache__/`, `*.pyc`, and hidden names
(`.ansible/`, `.ansible-lint`: connected-side lint config; a bundle path never starts with a
dot). Folders with no file in them (an empty `collections/`) leave nothing behind.
"""

from __future__ import annotations

import re
import stat
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from sglx.bundle import layout
from sglx.bundle.hashed_files import copy_hashed, write_hashed
from sglx.bundle.manifest import FileEntry, Kind, Slot
from sglx_core.digests import HEX64
from sglx_core.errors import SglxError
from sglx_core.hashing import sha256_file
from sglx_core.paths import ansible_dir, host_checks_dir
from sglx_core.profile import Profile, images_dir
from sglx_core.sizes import human_bytes

LOCK_NAME = "ansible.txt"
SKIP_DIRS = frozenset({"__pycache__"})
SKIP_SUFFIXES = (".pyc", ".pyo")
# One part of a bundle path (manifest.RelPath): SHA256SUMS and install.sh read them unquoted.
_PART = re.compile(r"^[A-Za-z0-9_+@=-][A-Za-z0-9._+@=-]*$")
_PIN = re.compile(r"^([A-Za-z0-9._-]+)==(\S+)$")
_HASH = re.compile(f"^--hash=sha256:({HEX64})$")


@dataclass(frozen=True)
class Item:
    """One file of the bundle's ansible/: copied from `source`, or `data` written."""

    path: str
    kind: Kind
    size: int
    source: Path | None = None
    data: bytes | None = None
    sha256: str | None = None  # what the copy must hash to (control wheels)


@dataclass(frozen=True)
class AnsibleContent:
    arch: str
    items: tuple[Item, ...]
    wheels: int

    @property
    def size(self) -> int:
        return sum(item.size for item in self.items)

    def slot(self) -> Slot:
        what = (
            f"playbooks, roles and the example inventory (group_vars/{self.arch} rendered from "
            f"the profile) in {layout.ANSIBLE}/, the host checks in {layout.ANSIBLE_HOST_CHECKS}/"
            f", the control node's lock {layout.ANSIBLE_LOCK}"
        )
        if self.wheels:
            wheels = (
                f" and its {self.wheels} wheels, sglx's own among them, in "
                f"{layout.ANSIBLE_WHEELS}/ (pip install --no-index --require-hashes -r "
                "control-node.txt --find-links wheels, then sglx hosts check --bundle BUNDLE)"
            )
        else:
            wheels = (
                "; its wheels are not included: fetch them with `pip download --no-deps "
                f"--require-hashes -r bundles/locks/{LOCK_NAME} -d DIR` and create the bundle "
                "with --control-wheels DIR"
            )
        return Slot(included=True, path=layout.ANSIBLE, note=what + wheels)


def collect(
    profile: Profile, *, control_wheels: Path | None = None, root: Path | None = None
) -> AnsibleContent:
    """Everything the bundle's ansible/ will hold, checked, nothing written yet.

    `root` is the checkout (default: the folder above images/, where bundles/locks/ is found,
    as `lockfile.locks_dir(images_dir())` does); tests pass a folder of their own."""
    from sglx.ansible_vars import VARS_FILE, vars_text
    from sglx.wheels.lockfile import locks_dir

    images = images_dir() if root is None else root / "images"
    root = images.parent
    lock = locks_dir(images) / LOCK_NAME
    content = _need_dir(ansible_dir(root), "the Ansible content")
    suite = _need_dir(host_checks_dir(root), "the host-check suite")
    budget = _Budget()
    items: list[Item] = []
    _walk(content, layout.ANSIBLE, items, budget)
    rendered = f"{layout.ANSIBLE}/inventory/example/group_vars/{profile.arch}/{VARS_FILE}"
    items = [item for item in items if item.path != rendered]
    data = vars_text(profile).encode()
    items.append(Item(rendered, "ansible", len(data), data=data))
    checks = _host_checks(suite, budget)
    if not checks:
        raise SglxError(
            f"{suite} holds no *.py file: the host-check suite is missing",
            hint="run sglx from its source checkout, which has hostchecks/",
            code="bundle_ansible",
            path=str(suite),
        )
    items += checks
    if not lock.is_file() or lock.is_symlink():
        raise SglxError(
            f"no control-node lock at {lock} (a plain file)",
            hint="run sglx from its source checkout, which has bundles/locks/ansible.txt",
            code="bundle_ansible",
            path=str(lock),
        )
    lock_item = _file_item(lock, layout.ANSIBLE_LOCK, "lock", budget)
    wheels = [] if control_wheels is None else control_wheel_items(lock, control_wheels)
    if wheels:
        own, pin = own_wheel()
        wheels.append(own)
        data = lock.read_bytes() + pin
        lock_item = Item(layout.ANSIBLE_LOCK, "lock", len(data), data=data)
    items += [lock_item, *wheels]
    return AnsibleContent(profile.arch, tuple(sorted(items, key=lambda i: i.path)), len(wheels))


def write(content: AnsibleContent, stage: Path) -> list[FileEntry]:
    """Copy or write every item under `stage`, hashed on the way; a control wheel that no
    longer hashes to its pin (changed since `collect`) is an error."""
    entries = []
    for item in content.items:
        if item.data is not None:
            copied = write_hashed(stage / item.path, item.data)
        else:
            assert item.source is not None
            copied = copy_hashed(item.source, stage / item.path)
        if item.sha256 is not None and copied.sha256 != item.sha256:
            raise SglxError(
                f"{item.source} changed while the bundle was being written (its sha256 is no "
                "longer the one the lock pins)",
                hint="do not edit --control-wheels DIR while a bundle is created; run it again",
                code="usage",
                path=str(item.source),
            )
        entries.append(
            FileEntry(path=item.path, size=copied.size, sha256=copied.sha256, kind=item.kind)
        )
    return entries


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    hashes: tuple[str, ...]


def read_pins(lock: Path) -> list[Pin]:
    """`name==version --hash=sha256:...` requirements of a pip lock (continuation lines
    joined, comments skipped); any other line is an error naming it."""
    pins: list[Pin] = []
    logical: list[tuple[int, str]] = []
    pending = ""
    start = 0
    for number, line in enumerate(lock.read_text(encoding="utf-8").splitlines(), start=1):
        text = line.split(" #", 1)[0].strip() if not line.lstrip().startswith("#") else ""
        if not pending:
            start = number
        if text.endswith("\\"):
            pending += text[:-1] + " "
            continue
        if pending + text:
            logical.append((start, pending + text))
        pending = ""
    if pending:
        logical.append((start, pending))
    for number, text in logical:
        words = text.split()
        pin = _PIN.match(words[0])
        hashes = [_HASH.match(word) for word in words[1:]]
        if pin is None or not hashes or not all(hashes):
            raise SglxError(
                f"{lock}:{number}: not a hash-pinned requirement ('name==version "
                f"--hash=sha256:...'): {text[:120]!r}",
                hint="pip --require-hashes needs every line pinned with its sha256",
                code="invalid_lock",
                path=str(lock),
            )
        pins.append(Pin(pin.group(1), pin.group(2), tuple(h.group(1) for h in hashes if h)))
    return pins


def control_wheel_items(lock: Path, folder: Path) -> list[Item]:
    """The wheel of `folder` for each pin of `lock`, each hashed now against the pin."""
    from packaging.utils import (
        InvalidWheelFilename,
        canonicalize_name,
        canonicalize_version,
        parse_wheel_filename,
    )

    fetch = f"pip download --no-deps --require-hashes -r bundles/locks/{LOCK_NAME} -d {folder}"
    if not folder.is_dir():
        raise SglxError(
            f"--control-wheels {folder} is not a folder",
            hint=f"fetch the control node's wheels into it: {fetch}",
            code="usage",
            path=str(folder),
        )
    found: dict[tuple[str, str], list[Path]] = {}
    for wheel in sorted(folder.glob("*.whl")):
        try:
            name, version, _, _ = parse_wheel_filename(wheel.name)
        except InvalidWheelFilename:
            continue
        key = (str(name), canonicalize_version(version))
        found.setdefault(key, []).append(wheel)
    items: list[Item] = []
    missing: list[str] = []
    for pin in read_pins(lock):
        key = (canonicalize_name(pin.name), canonicalize_version(pin.version))
        candidates = found.get(key, [])
        if not candidates:
            missing.append(f"{pin.name}=={pin.version}")
            continue
        digests = {wheel: sha256_file(wheel) for wheel in candidates}
        good = [wheel for wheel, digest in digests.items() if digest in pin.hashes]
        if not good:
            wheel = candidates[0]
            raise SglxError(
                f"--control-wheels: {wheel.name} does not match its sha256 in {lock} (it is "
                f"{digests[wheel]}, the lock pins {pin.hashes[0]})",
                hint=f"delete it and fetch the locked wheels again: {fetch}",
                code="usage",
                path=str(wheel),
            )
        wheel = good[0]
        if wheel.is_symlink() or not wheel.is_file():
            raise SglxError(
                f"--control-wheels: {wheel} is not a plain file",
                hint=f"fetch the wheels as plain files: {fetch}",
                code="usage",
                path=str(wheel),
            )
        path = f"{layout.ANSIBLE_WHEELS}/{wheel.name}"
        _check_name(path, wheel)
        items.append(
            Item(path, "ansible", wheel.stat().st_size, source=wheel, sha256=digests[wheel])
        )
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if missing[3:] else "")
        raise SglxError(
            f"--control-wheels {folder} lacks {len(missing)} wheels of {lock}: {shown}",
            hint=f"fetch them: {fetch}",
            code="usage",
            path=str(folder),
        )
    return items


def own_wheel() -> tuple[Item, bytes]:
    """sglx's own wheel (the host tool and its core, base dependencies only) built from the
    checkout sglx runs from, and its pin for the control-node lock: what `sglx hosts check`
    needs beside the lock on a control node (the host checks import the core and the Ansible
    vars). Built once per process."""
    path, data, digest, pin = _built_own_wheel()
    return Item(path, "ansible", len(data), data=data, sha256=digest), pin


@cache
def _built_own_wheel() -> tuple[str, bytes, str, bytes]:
    import tempfile

    from packaging.utils import parse_wheel_filename

    from sglx.image.build import build_own_wheels

    with tempfile.TemporaryDirectory(prefix="sglx-own-wheel-") as scratch:
        (wheel,) = build_own_wheels(Path(scratch) / "wheels", Path(scratch) / "src", ["sglx"])
        data, digest = wheel.read_bytes(), sha256_file(wheel)
        name, version, _, _ = parse_wheel_filename(wheel.name)
        path = f"{layout.ANSIBLE_WHEELS}/{wheel.name}"
    pin = (
        "# sglx's own wheel, built with this bundle (not in bundles/locks/ansible.txt)\n"
        f"{name}=={version} \\\n    --hash=sha256:{digest}\n"
    )
    return path, data, digest, pin.encode()


@dataclass
class _Budget:
    files: int = 0
    size: int = 0

    def add(self, source: Path, size: int) -> None:
        self.files += 1
        self.size += size
        if self.files > layout.MAX_ANSIBLE_FILES:
            raise SglxError(
                f"the bundle's Ansible content would hold more than {layout.MAX_ANSIBLE_FILES} "
                f"files (the limit), at {source}",
                hint="remove what does not belong there (a virtualenv, installed collections, "
                "caches) and create the bundle again",
                code="bundle_ansible",
                path=str(source),
            )
        if self.size > layout.MAX_ANSIBLE_BYTES:
            raise SglxError(
                "the bundle's Ansible content would be larger than "
                f"{human_bytes(layout.MAX_ANSIBLE_BYTES)} (the limit), at {source}",
                hint="remove what does not belong there (a virtualenv, installed collections, "
                "large files) and create the bundle again",
                code="bundle_ansible",
                path=str(source),
            )


def _need_dir(path: Path, what: str) -> Path:
    if path.is_symlink() or not path.is_dir():
        raise SglxError(
            f"{what} is not at {path} (a folder)",
            hint="run sglx from its source checkout, which has ansible/ and hostchecks/",
            code="bundle_ansible",
            path=str(path),
        )
    return path


def _walk(folder: Path, prefix: str, items: list[Item], budget: _Budget) -> None:
    for source in sorted(folder.iterdir(), key=lambda p: p.name):
        name = source.name
        if name.startswith(".") or name in SKIP_DIRS or name.endswith(SKIP_SUFFIXES):
            continue
        mode = source.lstat().st_mode
        path = f"{prefix}/{name}"
        if stat.S_ISDIR(mode):
            if path.count("/") >= layout.MAX_PATH_DEPTH:
                _check_name(path, source)  # too deep: refused with the rule
            _walk(source, path, items, budget)
        else:
            items.append(_file_item(source, path, "ansible", budget, mode))


def _host_checks(suite: Path, budget: _Budget) -> list[Item]:
    return [
        _file_item(source, f"{layout.ANSIBLE_HOST_CHECKS}/{source.name}", "ansible", budget)
        for source in sorted(suite.iterdir(), key=lambda p: p.name)
        if (source.suffix == ".py" or source.name == "pytest.ini")
        and not source.name.startswith(".")
    ]


def _file_item(
    source: Path, path: str, kind: Kind, budget: _Budget, mode: int | None = None
) -> Item:
    mode = source.lstat().st_mode if mode is None else mode
    if stat.S_ISLNK(mode):
        raise SglxError(
            f"{source} is a symbolic link: a bundle carries plain files and folders only",
            hint="replace the link with the file or folder it points to (or remove it), then "
            "create the bundle again",
            code="bundle_ansible",
            path=str(source),
        )
    if not stat.S_ISREG(mode):
        raise SglxError(
            f"{source} is not a regular file or folder (a device, FIFO or socket)",
            hint="remove it, then create the bundle again",
            code="bundle_ansible",
            path=str(source),
        )
    _check_name(path, source)
    size = source.stat().st_size
    budget.add(source, size)
    return Item(path, kind, size, source=source)


def _check_name(path: str, source: Path) -> None:
    parts = path.split("/")
    if (
        not all(_PART.fullmatch(part) for part in parts)
        or len(path) > layout.MAX_PATH_CHARS
        or len(parts) > layout.MAX_PATH_DEPTH
    ):
        raise SglxError(
            f"{source} cannot be carried in a bundle as {path}: bundle paths are made of "
            f"[A-Za-z0-9._+@=-] parts not starting with a dot, at most {layout.MAX_PATH_CHARS} "
            f"characters and {layout.MAX_PATH_DEPTH} levels deep",
            hint="rename or move it, then create the bundle again",
            code="bundle_ansible",
            path=str(source),
        )
