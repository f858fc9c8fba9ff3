"""The SBOM (sglx.sbom) of a root laid out as an image is: dpkg's status and file lists on a
merged /usr, a venv's dist-info folders, and ELF files no package claims. The BOM is
validated with the CycloneDX library's own schema validator; the image's files are untrusted,
so a file past its bound is refused by name and a link never leaves the root."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sglx.sbom import ImageSbom
from sglx.sbom.contents import MAX_METADATA_BYTES, MAX_SEARCH_DEPTH, read_contents
from sglx.sbom.document import summary, validation_error
from sglx.sbom.spdx import from_cyclonedx
from sglx.scan.analysis import ScanReport, Target
from sglx.wheels.lockfile import Lock, Wheel
from sglx_core.errors import SglxError
from sglx_core.rootfs import RootFS

SITE = "opt/venv/lib/python3.11/site-packages"
STATUS = """\
Package: libfoo1
Status: install ok installed
Architecture: amd64
Source: foo (1.2-3)
Version: 1.2-3+b1
Depends: libc6 (>= 2.36), base-files | other

Package: libc6
Status: install ok installed
Architecture: amd64
Version: 2.36-9

Package: removed-pkg
Status: deinstall ok config-files
Architecture: amd64
Version: 0.1
"""
VENDOR_LIB = b"\x7fELF vendor library bytes"
LABELS = {
    "io.sglx.arch": "cpu",
    "io.sglx.lock.digest": "",  # set per test
    "io.sglx.model.name": "demo",
    "io.sglx.weights.digest": "sha256:" + "ab" * 32,
    "io.sglx.triton-cache": "cpu:x86_64",
    "org.opencontainers.image.base.name": "sglx/base-cpu:bookworm",
    "org.opencontainers.image.base.digest": "sha256:" + "cd" * 32,
}


def _write(root: Path, path: str, data: str | bytes) -> None:
    target = root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data.encode() if isinstance(data, str) else data)


def _dist(root: Path, name: str, version: str, requires: list[str], files: list[str]) -> None:
    folder = f"{SITE}/{name.replace('-', '_')}-{version}.dist-info"
    metadata = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    metadata += [f"Requires-Dist: {r}" for r in requires]
    _write(root, f"{folder}/METADATA", "\n".join(metadata) + "\n\nA description.\n")
    record = [f"{f},sha256=x,1" for f in files] + [f"{folder.rsplit('/', 1)[1]}/RECORD,,"]
    _write(root, f"{folder}/RECORD", "\n".join(record) + "\n")


@pytest.fixture
def image_root(tmp_path: Path) -> Path:
    root = tmp_path / "rootfs"
    _write(root, "usr/lib/x86_64-linux-gnu/libfoo.so.1", b"\x7fELF foo")
    _write(root, "usr/lib/x86_64-linux-gnu/libc.so.6", b"\x7fELF libc")
    (root / "lib").symlink_to("usr/lib")  # a merged /usr: dpkg's lists name /lib/...
    _write(root, "var/lib/dpkg/status", STATUS)
    _write(root, "var/lib/dpkg/info/libfoo1:amd64.list",
           "/.\n/lib/x86_64-linux-gnu\n/lib/x86_64-linux-gnu/libfoo.so.1\n")  # fmt: skip
    _write(root, "var/lib/dpkg/info/libc6:amd64.list", "/usr/lib/x86_64-linux-gnu/libc.so.6\n")
    _dist(root, "demo-app", "1.0", ["dep-pkg>=2", "extra-only; extra == 'gpu'"],
          ["demo_app/_ext.so", "../../../bin/demo"])  # fmt: skip
    _dist(root, "dep_pkg", "2.0", [], ["dep_pkg/__init__.py"])
    _write(root, f"{SITE}/demo_app/_ext.so", b"\x7fELF ext")
    _write(root, "opt/venv/bin/demo", "#!/opt/venv/bin/python\n")
    _write(root, "opt/vendor/lib/libvendor.so", VENDOR_LIB)
    _write(root, "usr/lib/os-release", 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\n'
           'VERSION_ID="12"\nID=debian\n')  # fmt: skip
    (root / "etc").mkdir()
    (root / "etc/os-release").symlink_to("../usr/lib/os-release")
    _dist(root, "stand-in", "0.1", [], [])  # metadata only: no code of its own
    return root


ELF = (
    "/usr/lib/x86_64-linux-gnu/libfoo.so.1",
    "/usr/lib/x86_64-linux-gnu/libc.so.6",
    f"/{SITE}/demo_app/_ext.so",
    "/opt/vendor/lib/libvendor.so",
)


def _report(root: Path, elf: tuple[str, ...] = ELF) -> ScanReport:
    return ScanReport(target=Target(kind="image", label="t", root=root), arch="cpu",
                      elf_paths=elf)  # fmt: skip


def test_packages_distributions_and_loose_elf_files_are_read(image_root: Path) -> None:
    contents = read_contents(RootFS(image_root), ELF)
    assert [(p.name, p.version, p.source, p.source_version) for p in contents.debian] == [
        ("libfoo1", "1.2-3+b1", "foo", "1.2-3"),
        ("libc6", "2.36-9", "libc6", "2.36-9"),
    ]  # the removed package is not installed
    (libfoo,) = [p for p in contents.debian if p.name == "libfoo1"]
    assert "/usr/lib/x86_64-linux-gnu/libfoo.so.1" in libfoo.files  # /lib read through the link
    assert libfoo.depends == ("libc6", "base-files", "other")
    demo, _, stand_in = sorted(contents.python, key=lambda d: d.key)
    assert demo.has_code and not stand_in.has_code
    assert (contents.os.id, contents.os.version_id) == ("debian", "12") if contents.os else False
    assert (demo.name, demo.version, demo.location) == ("demo-app", "1.0", f"/{SITE}")
    assert demo.requires == ("dep-pkg",)  # the extra's requirement left out
    assert f"/{SITE}/demo_app/_ext.so" in demo.files and "/opt/venv/bin/demo" in demo.files
    assert [(f.path, f.sha256, f.size) for f in contents.loose_elf] == [
        ("/opt/vendor/lib/libvendor.so", hashlib.sha256(VENDOR_LIB).hexdigest(), len(VENDOR_LIB))
    ]


def _bom(image_root: Path, lock: Lock | None = None, digest: str = "") -> dict[str, Any]:
    sbom = ImageSbom("sglx/cpu:test", "sha256:" + "ef" * 32, {**LABELS, "io.sglx.lock.digest":
                     digest}, lock, frozenset({("libc6", "2.36-9")}))  # fmt: skip
    sbom(RootFS(image_root), _report(image_root))
    text = sbom.text()
    assert text is not None
    assert validation_error(text) is None
    document: dict[str, Any] = json.loads(text)
    return document


def test_the_bom_validates_and_names_every_component_with_its_origin(image_root: Path) -> None:
    lock = Lock(
        "cpu", "", {}, (Wheel("dep-pkg", "2.0", "12" * 32, "dep_pkg-2.0-py3-none-any.whl"),)
    )
    document = _bom(image_root, lock, lock.digest)
    assert document["specVersion"] == "1.6"
    subject = document["metadata"]["component"]
    assert (subject["type"], subject["name"]) == ("container", "sglx/cpu:test")
    by_ref = {c["bom-ref"]: c for c in document["components"]}
    props = {ref: {p["name"]: p["value"] for p in c.get("properties", [])}
             for ref, c in by_ref.items()}  # fmt: skip
    libfoo = by_ref["deb:libfoo1@1.2-3+b1?arch=amd64"]
    assert libfoo["purl"] == "pkg:deb/debian/libfoo1@1.2-3%2Bb1?arch=amd64"
    assert props[libfoo["bom-ref"]]["sglx:origin"] == "sglx image layers"
    assert props["deb:libc6@2.36-9?arch=amd64"]["sglx:origin"] == "base image layers"
    dep = by_ref[f"pypi:dep-pkg@2.0@/{SITE}"]
    assert dep["purl"] == "pkg:pypi/dep-pkg@2.0"
    assert dep["hashes"] == [{"alg": "SHA-256", "content": "12" * 32}]  # the locked wheel's
    assert "hashes" not in by_ref[f"pypi:demo-app@1.0@/{SITE}"]  # not in the lock: no hash
    assert props[f"pypi:stand-in@0.1@/{SITE}"]["sglx:code"].startswith("none")
    assert by_ref["os:debian@12"]["type"] == "operating-system"
    loose = by_ref["file:/opt/vendor/lib/libvendor.so"]
    assert loose["type"] == "file"
    assert loose["hashes"][0]["content"] == hashlib.sha256(VENDOR_LIB).hexdigest()
    model = by_ref["model:" + LABELS["io.sglx.weights.digest"]]
    assert (model["type"], model["name"]) == ("machine-learning-model", "demo")
    assert by_ref["base:" + "sha256:" + "cd" * 32]["name"] == "sglx/base-cpu:bookworm"
    needs = {d["ref"]: set(d.get("dependsOn", [])) for d in document["dependencies"]}
    assert needs[f"pypi:demo-app@1.0@/{SITE}"] == {f"pypi:dep-pkg@2.0@/{SITE}"}
    assert needs["deb:libfoo1@1.2-3+b1?arch=amd64"] == {"deb:libc6@2.36-9?arch=amd64"}
    assert len(needs[subject["bom-ref"]]) == len(by_ref)
    assert summary(json.dumps(document)) == {
        "components": {
            "container": 1,
            "data": 1,
            "debian": 2,
            "file": 1,
            "machine-learning-model": 1,
            "operating-system": 1,
            "python": 3,
        },
        "base": f"sglx/base-cpu:bookworm (sha256:{'cd' * 32})",
        "model": f"demo ({LABELS['io.sglx.weights.digest']})",
    }


def test_the_spdx_form_says_the_same_and_the_spdx_tool_accepts_it(
    image_root: Path, tmp_path: Path
) -> None:
    """`bundle sbom --format spdx`: one SPDX 2.3 package per component, with its purl and
    SHA-256, the image CONTAINS each, Requires-Dist and Depends as DEPENDS_ON; valid by the SPDX
    project's own `pyspdxtools`."""
    lock = Lock(
        "cpu", "", {}, (Wheel("dep-pkg", "2.0", "12" * 32, "dep_pkg-2.0-py3-none-any.whl"),)
    )
    cyclonedx = _bom(image_root, lock, lock.digest)
    out = tmp_path / "sbom.spdx.json"
    out.write_text(from_cyclonedx(json.dumps(cyclonedx), where="sbom"))
    tool = Path(sys.executable).with_name("pyspdxtools")
    checked = subprocess.run([str(tool), "-i", str(out)], capture_output=True, text=True,
                             timeout=120, check=False)  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    document = json.loads(out.read_text())
    assert document["spdxVersion"] == "SPDX-2.3"
    packages = {p["name"]: p for p in document["packages"]}
    assert len(packages) == len(cyclonedx["components"]) + 1
    image = packages["sglx/cpu:test"]
    assert image["primaryPackagePurpose"] == "CONTAINER"
    dep = packages["dep_pkg"]  # as its METADATA spells it
    assert dep["externalRefs"] == [{"referenceCategory": "PACKAGE_MANAGER",
                                    "referenceLocator": "pkg:pypi/dep-pkg@2.0",
                                    "referenceType": "purl"}]  # fmt: skip
    assert dep["checksums"] == [{"algorithm": "SHA256", "checksumValue": "12" * 32}]
    assert packages["/opt/vendor/lib/libvendor.so"]["primaryPackagePurpose"] == "FILE"
    assert packages["demo"]["primaryPackagePurpose"] == "OTHER"
    ids = {p["SPDXID"]: p["name"] for p in document["packages"]}
    edges = {(ids.get(r["spdxElementId"], r["spdxElementId"]), r["relationshipType"],
              ids[r["relatedSpdxElement"]]) for r in document["relationships"]}  # fmt: skip
    assert ("SPDXRef-DOCUMENT", "DESCRIBES", "sglx/cpu:test") in edges
    assert ("demo-app", "DEPENDS_ON", "dep_pkg") in edges
    assert ("libfoo1", "DEPENDS_ON", "libc6") in edges
    assert sum(1 for e in edges if e[1] == "CONTAINS") == len(cyclonedx["components"])
    with pytest.raises(SglxError, match=r"not a CycloneDX document|names no image"):
        from_cyclonedx('{"bomFormat": 3}', where="x")
    with pytest.raises(SglxError, match="the SBOM is not valid JSON"):
        from_cyclonedx("[1, 2", where="x")


def test_a_lock_of_another_image_gives_no_hashes(image_root: Path) -> None:
    lock = Lock(
        "cpu", "", {}, (Wheel("dep-pkg", "2.0", "12" * 32, "dep_pkg-2.0-py3-none-any.whl"),)
    )
    document = _bom(image_root, lock, "sha256:" + "00" * 32)
    assert not [c for c in document["components"] if c.get("hashes") and
                c["bom-ref"].startswith("pypi:")]  # fmt: skip


def test_a_metadata_past_its_bound_is_refused_naming_it(image_root: Path) -> None:
    metadata = image_root / SITE / "dep_pkg-2.0.dist-info" / "METADATA"
    metadata.write_bytes(b"Name: x\n" + b"x" * MAX_METADATA_BYTES)
    with pytest.raises(SglxError, match=r"dep_pkg-2\.0\.dist-info/METADATA in the image") as caught:
        read_contents(RootFS(image_root), ELF)
    assert caught.value.code == "too_large"


def test_links_stay_inside_the_root_and_the_search_is_bounded(image_root: Path) -> None:
    status = image_root / "var/lib/dpkg/status"
    status.unlink()
    status.symlink_to("/var/lib/dpkg/status")  # this machine's own: re-rooted, so the image's
    deep = image_root.joinpath(*(["d"] * MAX_SEARCH_DEPTH), "site-packages", "x-1.dist-info")
    deep.mkdir(parents=True)
    (deep / "METADATA").write_text("Name: x\nVersion: 1\n")
    contents = read_contents(RootFS(image_root), ELF)
    assert contents.debian == ()  # the link points at itself inside the root: no status
    assert "x" not in {d.key for d in contents.python}
    # dpkg no longer claims libfoo and libc: they are listed as files with their hashes
    assert {f.path for f in contents.loose_elf} == {
        "/usr/lib/x86_64-linux-gnu/libfoo.so.1", "/usr/lib/x86_64-linux-gnu/libc.so.6",
        "/opt/vendor/lib/libvendor.so"}  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["PATH", "--sbom", "out.json"], "--sbom goes with --image REF or --bundle DIR"),
        # checked before the long scan starts: a folder is never replaced by the SBOM
        (["--image", "x", "--sbom", "PATH"], "sglx writes only to a regular file"),
    ],
)
def test_sbom_usage_errors_name_the_fix(
    sglx: Any, tmp_path: Path, argv: list[str], said: str
) -> None:
    argv = [str(tmp_path) if a == "PATH" else a for a in argv]
    argv = [str(tmp_path / a) if a.endswith("out.json") else a for a in argv]
    code, out, err = sglx("scan", *argv)
    assert code == 2, out + err
    assert said in out + err and "Traceback" not in err
    assert not list(tmp_path.glob("*.json"))
