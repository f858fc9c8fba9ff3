"""What a bundle says is checked before anything believes it (issue 21): the manifest against
itself and the layout (16), bundle values validated and quoted when echoed (4), no output
folder inside the bundle (9), the site's signers make a signature required (17), bounded reads
of the signature and the manifest (12), malformed manifests, scan reports and weights folder
names named in words (14).

Bundles are written by the real chunk writer and manifest code (helpers.bundles.hand_bundle),
without an engine; install cases need the engine only to be asked whether it has the image.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.bundles import SCAN_OK, hand_bundle

from sglx.bundle import layout
from sglx.bundle.carried_spec import read_carried_spec
from sglx.run_spec import run_spec
from sglx_core.profile import load_profile

CliRunner = Callable[..., tuple[int, str, str]]
ARCHIVE = os.urandom(3000)  # three chunks of 1 KiB: 1024, 1024, 952
CHUNK = 1024


def tree(root: Path) -> dict[str, bytes]:
    """Every file under `root` with its bytes: compared before and after a refused command."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    archive = tmp_path / "archive.tar"
    archive.write_bytes(ARCHIVE)
    files = {
        "install.sh": b"#!/bin/sh\n",
        layout.SCAN_REPORT: SCAN_OK,
        layout.VERSIONS: b"{}\n",
        # the run spec the start line is printed from (sglx.run_spec)
        layout.RUN_SPEC: json.dumps(run_spec(load_profile("cpu")).to_json()).encode(),
    }
    folder = hand_bundle(tmp_path / "bundle", archive, files, chunk_size=CHUNK)
    archive.unlink()
    return folder


def render_sums(folder: Path, document: dict[str, Any], raw: bytes) -> None:
    """SHA256SUMS as the bundle's own tools render it, from a manifest that need not be valid:
    what an attacker re-renders after editing bundle.json."""
    lines = [f"{e['sha256']}  {e['path']}" for e in sorted(document["files"], key=_path)]
    lines.append(f"{hashlib.sha256(raw).hexdigest()}  {layout.MANIFEST}")
    signature = folder / layout.SIGNATURE
    if signature.exists():
        lines.append(f"{hashlib.sha256(signature.read_bytes()).hexdigest()}  {layout.SIGNATURE}")
    (folder / layout.SUMS).write_text("\n".join(lines) + "\n")


def _path(entry: dict[str, Any]) -> str:
    return str(entry["path"])


def rewrite(folder: Path, edit: Callable[[dict[str, Any]], None], raw: bytes | None = None) -> None:
    """Edit bundle.json (or replace it with `raw`) and re-render SHA256SUMS to match."""
    document = json.loads((folder / layout.MANIFEST).read_bytes())
    edit(document)
    data = raw if raw is not None else json.dumps(document, indent=2).encode()
    (folder / layout.MANIFEST).write_bytes(data)
    render_sums(folder, document, data)


def entry(document: dict[str, Any], path: str) -> dict[str, Any]:
    return next(e for e in document["files"] if e["path"] == path)


def add_file(folder: Path, document: dict[str, Any], path: str, data: bytes, kind: str) -> None:
    (folder / path).parent.mkdir(parents=True, exist_ok=True)
    (folder / path).write_bytes(data)
    sha = hashlib.sha256(data).hexdigest()
    document["files"].append({"path": path, "size": len(data), "sha256": sha, "kind": kind})


def assert_refused(out: str, err: str, *words: str) -> None:
    for word in words:
        assert word in out + err
    assert "Traceback" not in out + err
    assert "bug in sglx" not in out + err


# ---------------------------------------------------------------------------------------------
# 16 (and 4, 14): the manifest against itself, the layout and the fields sglx uses
# ---------------------------------------------------------------------------------------------


def _set(*keys: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(document: dict[str, Any]) -> None:
        node = document
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value

    return edit


def _duplicate_chunk(document: dict[str, Any]) -> None:
    document["files"].append(dict(entry(document, "image/image.tar.001")))


def _reorder_chunks(document: dict[str, Any]) -> None:
    chunks = document["image"]["chunks"]
    chunks[0], chunks[1] = chunks[1], chunks[0]


def _drop_chunk(document: dict[str, Any]) -> None:
    document["image"]["chunks"].pop()
    document["image"]["size"] -= 952


def _wrong_kind(document: dict[str, Any]) -> None:
    entry(document, "install.sh")["kind"] = "meta"


INCONSISTENT = {
    "size against the last chunk": (
        _set("image", "size", value=3001),
        "files: image/image.tar.002 is 952 bytes, the image record says 953",
    ),
    "chunk size against the chunk count": (
        _set("image", "chunk_size", value=2048),
        "image.chunks: 3000 bytes in chunks of 2048 make 2 chunks, the list has 3",
    ),
    "chunks out of order": (
        _reorder_chunks,
        "image.chunks: chunk 0 is image/image.tar.001, not image/image.tar.000",
    ),
    "a chunk file left out of the chunk list": (
        _drop_chunk,
        "files: image/image.tar.002 has no place in the bundle layout",
    ),
    "a file listed twice": (_duplicate_chunk, "files: image/image.tar.001 is listed twice"),
    "a kind the layout does not give": (
        _wrong_kind,
        "files: install.sh is of kind 'meta', the layout says 'install'",
    ),
    "another archive name": (
        _set("image", "archive", value="image/other.tar"),
        "image.archive: image/other.tar is not image/image.tar",
    ),
    "an image id that is no digest": (
        _set("image", "id", value="sha256:XYZ"),
        "image.id: String should match pattern",
    ),
    "an arch that is no arch name": (
        _set("arch", value="../cpu"),
        "arch: String should match pattern",
    ),
    "a weights name of '.'": (
        _set(
            "weights",
            value={"name": ".", "path": "weights/x", "digest": "sha256:" + "0" * 64, "size": 0},
        ),
        "weights.name: String should match pattern",
    ),
    # item 4: a reference that is a shell command, or forges a line of the report
    "an image ref with a shell command": (
        _set("image", "ref", value="probe/tiny:1; touch /tmp/pwned"),
        "image.ref: 'probe/tiny:1; touch /tmp/pwned' is not an image reference",
    ),
    "an image ref with a newline and an escape": (
        _set("image", "ref", value="probe/tiny:1\n\x1b[32mok: all passed"),
        r"image.ref: 'probe/tiny:1\n\x1b[32mok: all passed' is not an image reference",
    ),
}


@pytest.mark.parametrize("case", sorted(INCONSISTENT))
def test_an_unsigned_manifest_that_contradicts_itself_is_refused(
    sglx: CliRunner, bundle: Path, case: str
) -> None:
    edit, words = INCONSISTENT[case]
    rewrite(bundle, edit)
    before = tree(bundle.parent)
    code, out, err = sglx("bundle", "verify", str(bundle), "--no-scan")
    assert code == 1
    assert_refused(out, err, "is not a valid sglx bundle manifest", words, "re-copy bundle.json")
    assert "\x1b" not in out + err
    assert tree(bundle.parent) == before


def test_the_hand_made_bundle_verifies_as_made(sglx: CliRunner, bundle: Path) -> None:
    """The cases above start from a bundle that passes: each finding is the edit's."""
    code, out, err = sglx("bundle", "verify", str(bundle), "--no-scan")
    assert (code, "bundle verified" in out) == (0, True), out + err


def test_a_file_outside_the_layout_is_refused_even_with_hashes_made_consistent(
    sglx: CliRunner, bundle: Path
) -> None:
    rewrite(bundle, lambda d: add_file(bundle, d, "notes/readme.txt", b"hi\n", "meta"))
    code, out, err = sglx("bundle", "verify", str(bundle), "--no-scan")
    assert code == 1
    assert_refused(out, err, "files: notes/readme.txt has no place in the bundle layout")


def test_a_repeated_key_is_refused_not_read_last_one_wins(sglx: CliRunner, bundle: Path) -> None:
    text = (bundle / layout.MANIFEST).read_text()
    raw = text.replace('"arch": "cpu"', '"arch": "cpu", "arch": "gfx942"', 1).encode()
    assert raw != text.encode()
    rewrite(bundle, lambda d: None, raw=raw)
    code, out, err = sglx("bundle", "verify", str(bundle), "--no-scan")
    assert code == 1
    assert_refused(out, err, "repeats the key 'arch' in one object", "re-copy bundle.json")


def test_a_manifest_nested_1000_deep_is_named_not_a_crash(sglx: CliRunner, bundle: Path) -> None:
    raw = b'{"format": ' + b"[" * 1000 + b"]" * 1000 + b"}"
    rewrite(bundle, lambda d: None, raw=raw)
    code, out, err = sglx("bundle", "verify", str(bundle), "--no-scan")
    assert code == 1
    assert_refused(out, err, "the bundle manifest is nested more than 64 levels deep")


def test_a_file_name_that_would_forge_a_report_line_is_shown_quoted(
    sglx: CliRunner, bundle: Path
) -> None:
    (bundle / "meta" / "x\n\x1b[32mbundle verified").write_bytes(b"")
    code, out, err = sglx("bundle", "verify", str(bundle), "--no-scan")
    assert code == 1
    assert_refused(out, err, r"'meta/x\n\x1b[32mbundle verified' is not part of the bundle")
    assert "\x1b" not in out + err


# ---------------------------------------------------------------------------------------------
# 4: the "start the server with" line is a shell line whatever the values in it
# ---------------------------------------------------------------------------------------------


def test_the_start_line_quotes_every_word(bundle: Path, tmp_path: Path) -> None:
    from sglx.bundle.install import Steps, _result
    from sglx.bundle.manifest import parse

    manifest = parse((bundle / layout.MANIFEST).read_bytes(), "bundle.json")
    weights = tmp_path / "my weights; touch pwned" / "demo"
    result = _result(bundle, read_carried_spec(bundle), manifest, Steps(), weights)
    [line] = [x for x in result.lines if x.startswith("start the server with: ")]
    words = shlex.split(line.removeprefix("start the server with: "))
    assert words == result.data["docker_run"]
    assert f"{weights}:/models/model:ro" in words
    assert words[-1] == manifest.image.ref


# ---------------------------------------------------------------------------------------------
# 9: no output folder inside the bundle
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "inside", "words"),
    [
        ("--state", "state", "the state folder (--state)"),
        ("--state", ".", "the state folder (--state)"),
        ("--venv", "meta/venv", "the venv (--venv)"),
    ],
)
def test_an_output_folder_inside_the_bundle_is_refused_before_anything_is_written(
    sglx: CliRunner, bundle: Path, tmp_path: Path, flag: str, inside: str, words: str
) -> None:
    before = tree(tmp_path)
    target = bundle / inside
    args = ["bundle", "install", str(bundle), flag, str(target)]
    if flag != "--state":
        args += ["--state", str(tmp_path / "state")]
    code, out, err = sglx(*args)
    assert code == 2
    assert_refused(out, err, f"{words} {target} is inside the bundle {bundle}")
    assert_refused(out, err, "choose a folder outside the bundle")
    assert tree(tmp_path) == before
    assert not (tmp_path / "state").exists()
    code, out, _ = sglx("bundle", "verify", str(bundle), "--no-scan")
    assert code == 0, out


def test_a_state_folder_reached_through_a_link_into_the_bundle_is_refused(
    sglx: CliRunner, bundle: Path, tmp_path: Path
) -> None:
    (tmp_path / "link").symlink_to(bundle / "meta")
    code, out, err = sglx("bundle", "install", str(bundle), "--state", str(tmp_path / "link/s"))
    assert code == 2
    assert_refused(out, err, "is inside the bundle")
    assert not (bundle / "meta/s").exists()


# ---------------------------------------------------------------------------------------------
# 17: configured signers make a signature required; 12: the signature read is bounded
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def signers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("keys")
    key = folder / "site"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "site", "-f", str(key)], check=True
    )
    kind, public = (folder / "site.pub").read_text().split()[:2]
    (folder / "allowed").write_text(f"site@sglx {kind} {public}\n")
    return {"key": key, "allowed": folder / "allowed"}


def sign(folder: Path, key: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-Y", "sign", "-q", "-f", str(key), "-n", layout.SIGN_NAMESPACE,
         str(folder / layout.MANIFEST)],
        check=True,
    )  # fmt: skip
    rewrite(folder, lambda d: None, raw=(folder / layout.MANIFEST).read_bytes())


def strip_signature(folder: Path) -> None:
    """The downgrade: delete the signature and re-render SHA256SUMS without it."""
    (folder / layout.SIGNATURE).unlink()
    rewrite(folder, lambda d: None, raw=(folder / layout.MANIFEST).read_bytes())


def test_a_signed_bundle_verifies_against_the_allowed_signers(
    sglx: CliRunner, bundle: Path, signers: dict[str, Path]
) -> None:
    sign(bundle, signers["key"])
    allowed = str(signers["allowed"])
    code, out, err = sglx(
        "bundle", "verify", str(bundle), "--no-scan", "--allowed-signers", allowed
    )
    assert (code, "bundle verified" in out) == (0, True), out + err


def test_a_deleted_signature_fails_verify_and_install_when_signers_are_given(
    sglx: CliRunner, bundle: Path, signers: dict[str, Path], tmp_path: Path, docker: Any
) -> None:
    sign(bundle, signers["key"])
    strip_signature(bundle)
    allowed = str(signers["allowed"])
    code, out, err = sglx(
        "bundle", "verify", str(bundle), "--no-scan", "--allowed-signers", allowed
    )
    assert code == 1
    assert_refused(
        out,
        err,
        "the bundle is not signed (no bundle.json.sig) and this site requires signatures",
        f"signers are configured in {allowed}",
    )
    state = tmp_path / "state"
    code, out, err = sglx(
        "bundle", "install", str(bundle), "--state", str(state), "--allowed-signers", allowed
    )
    assert code == 1
    assert_refused(out, err, "the bundle is not signed", "nothing was installed")
    assert [p.name for p in state.iterdir()] == [f"sha256-{_manifest_sha(bundle)}.json"]


def _manifest_sha(folder: Path) -> str:
    return hashlib.sha256((folder / layout.MANIFEST).read_bytes()).hexdigest()


# `sglx ARGS` in a child that prints its own peak memory (KiB) on its last stderr line: VmHWM
# belongs to the address space exec made (its ru_maxrss would count the pages it shared with
# this large pytest process before exec).
MEASURED = (
    "import re, sys\n"
    "from sglx.cli import main\n"
    "code = main(sys.argv[1:])\n"
    "status = open('/proc/self/status').read()\n"
    "print(re.search(r'VmHWM:\\s+(\\d+) kB', status).group(1), file=sys.stderr)\n"
    "sys.exit(code)\n"
)


def _sglx_child(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", MEASURED, *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        check=False,
    )


def test_the_site_signers_file_makes_a_signature_required(
    bundle: Path, signers: dict[str, Path]
) -> None:
    """$SGLX_ALLOWED_SIGNERS (else /etc/sglx/allowed_signers) counts as --allowed-signers:
    signed bundles are checked against it, unsigned ones refused. A child process: the
    environment is the process's, and tests running beside this one must not see it."""
    env = {"SGLX_ALLOWED_SIGNERS": str(signers["allowed"])}
    sign(bundle, signers["key"])
    done = _sglx_child("bundle", "verify", str(bundle), "--no-scan", "--json", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["data"]["signature_checked"] is True
    strip_signature(bundle)
    done = _sglx_child("bundle", "verify", str(bundle), "--no-scan", env=env)
    assert done.returncode == 1
    assert_refused(done.stdout, done.stderr, "the bundle is not signed", str(signers["allowed"]))
    missing = {"SGLX_ALLOWED_SIGNERS": str(signers["allowed"]) + ".gone"}
    sign(bundle, signers["key"])
    done = _sglx_child("bundle", "verify", str(bundle), "--no-scan", env=missing)
    assert done.returncode == 2
    assert_refused(done.stdout, done.stderr, f"allowed signers {missing['SGLX_ALLOWED_SIGNERS']}")


def test_a_sparse_1_gib_signature_or_manifest_is_refused_without_reading_it(
    bundle: Path, tmp_path: Path
) -> None:
    signature = bundle / layout.SIGNATURE
    signature.write_bytes(b"-----BEGIN SSH SIGNATURE-----\n")
    os.truncate(signature, 1 << 30)
    done = _sglx_child("bundle", "verify", str(bundle), "--no-scan", env={})
    assert done.returncode == 1
    assert_refused(done.stdout, done.stderr, "the signature is larger than 16 KiB")
    assert peak_kib(done) < 300 << 10  # far below the 1 GiB it would cost read whole
    signature.unlink()
    os.truncate(bundle / layout.MANIFEST, 1 << 30)
    done = _sglx_child("bundle", "verify", str(bundle), "--no-scan", env={})
    assert done.returncode == 1
    assert_refused(done.stdout, done.stderr, "more than a manifest can be")
    assert peak_kib(done) < 300 << 10


def peak_kib(done: subprocess.CompletedProcess[str]) -> int:
    return int(done.stderr.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------
# 14: malformed meta/scan.json, and the weights folder name checked before the image is saved
# ---------------------------------------------------------------------------------------------


SCAN_REPORTS = {
    "a list": (b'["status", "ok"]', "not a scan report"),
    "deep": (b'{"status": ' + b"[" * 1000 + b"]" * 1000 + b"}", "nested more than 64 levels"),
    "not UTF-8": (b'{"status": "\xff\xfe"}', "the scan report is not valid JSON"),
    "not JSON": (b"{status: ok", "the scan report is not valid JSON"),
}


@pytest.mark.parametrize("case", sorted(SCAN_REPORTS))
def test_a_malformed_scan_report_is_named_and_nothing_is_installed(
    sglx: CliRunner, bundle: Path, tmp_path: Path, docker: Any, case: str
) -> None:
    data, words = SCAN_REPORTS[case]

    def replace(document: dict[str, Any]) -> None:
        document["files"].remove(entry(document, layout.SCAN_REPORT))
        add_file(bundle, document, layout.SCAN_REPORT, data, "meta")

    rewrite(bundle, replace)
    code, out, err = sglx("bundle", "install", str(bundle), "--state", str(tmp_path / "s"))
    assert code == 1
    assert_refused(out, err, f"{layout.SCAN_REPORT}: ", words, "nothing was installed")


def test_an_unscanned_bundle_is_not_installed_unless_the_operator_accepts_it(
    sglx: CliRunner, bundle: Path, tmp_path: Path, docker: Any
) -> None:
    """Issue 37 item 4: install does not scan, so a bundle that carries no scan report (made
    with --no-scan) is "not scanned", a finding, and nothing is installed; --no-scan accepts it
    (here the install then goes on to load the image archive, which is random bytes)."""

    def drop(document: dict[str, Any]) -> None:
        document["files"].remove(entry(document, layout.SCAN_REPORT))
        (bundle / layout.SCAN_REPORT).unlink()

    rewrite(bundle, drop)
    state = str(tmp_path / "s")
    code, out, err = sglx("bundle", "install", str(bundle), "--state", state)
    assert code == 1
    assert_refused(out, err, "not scanned: the bundle carries no meta/scan.json, and install "
                   "does not scan", "install with --no-scan", "nothing was installed")  # fmt: skip
    code, out, err = sglx("bundle", "install", str(bundle), "--state", state, "--no-scan")
    assert "not scanned" not in out + err and "loading fixture-scan:test" in err, out + err
    assert code == 2 and "docker load of fixture-scan:test failed" in err, out + err


@pytest.mark.parametrize("name", ["my model", "modèle", ".hidden", "a" * 129])
def test_a_weights_folder_name_a_bundle_cannot_hold_is_refused_before_the_engine_is_asked(
    sglx: CliRunner, tmp_path: Path, name: str
) -> None:
    weights = tmp_path / name
    weights.mkdir()
    out_dir = tmp_path / "out"
    code, out, err = sglx(
        "bundle", "create", "--arch", "cpu", "--image", "sglx-test/no-such-image:1",
        "--weights-outside", str(weights), "--out", str(out_dir), "--no-scan",
    )  # fmt: skip
    assert code == 2
    assert_refused(out, err, f"{name!r} cannot name weights in a bundle", "rename the folder")
    assert "no image" not in err  # the name is checked first, the engine not asked
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_a_bad_image_reference_is_refused_before_the_engine_is_asked(
    sglx: CliRunner, tmp_path: Path
) -> None:
    code, out, err = sglx(
        "bundle", "create", "--arch", "cpu", "--image", "probe/tiny:1; touch x",
        "--out", str(tmp_path / "out"),
    )  # fmt: skip
    assert code == 2
    assert_refused(out, err, "--image: 'probe/tiny:1; touch x' is not an image reference")
    assert list(tmp_path.iterdir()) == []
