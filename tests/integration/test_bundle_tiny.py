"""`sglx bundle create | verify | install` on a tiny image made with `docker import`: the format,
every corruption named with nothing installed, signatures, free space, and resume after a kill.

The image is a few MB and the chunk size 1 MiB, so bundles have several chunks and each test
costs seconds. Every image, bundle and mount is removed when its test or module ends.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.bundles import import_tiny_image, sglx_process

from sglx.engine import image_ids
from sglx.sbom.document import validation_error

CliRunner = Callable[..., tuple[int, str, str]]
JsonRunner = Callable[..., tuple[int, dict[str, Any]]]
CHUNK = "1MiB"


def remove_image(docker: Any, ref: str) -> None:
    from docker.errors import ImageNotFound

    with contextlib.suppress(ImageNotFound):
        docker.images.remove(ref, force=True)


def has_image(docker: Any, image_id: str) -> bool:
    return image_id in image_ids(docker)


@pytest.fixture(scope="module")
def tiny(docker: Any, run_id: str) -> Iterator[dict[str, str]]:
    tag = f"sglx-test/bundle-tiny:{run_id}"
    image_id = import_tiny_image(docker, tag)
    yield {"tag": tag, "id": image_id}
    remove_image(docker, image_id)


@pytest.fixture(scope="module")
def pristine(
    tiny: dict[str, str], docker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """One bundle of the tiny image; the image is then removed from the engine, so each test
    starts from a site that does not have it."""
    from sglx.cli import main

    out = tmp_path_factory.mktemp("pristine") / "bundle"
    args = ["bundle", "create", "--arch", "cpu", "--image", tiny["tag"], "--out", str(out)]
    assert main([*args, "--chunk-size", CHUNK, "--no-scan", "-q"]) == 0
    remove_image(docker, tiny["id"])
    yield out
    shutil.rmtree(out.parent, ignore_errors=True)


@pytest.fixture
def bundle(pristine: Path, tmp_path: Path, docker: Any, tiny: dict[str, str]) -> Iterator[Path]:
    copy = tmp_path / "bundle"
    shutil.copytree(pristine, copy)
    yield copy
    shutil.rmtree(copy, ignore_errors=True)
    remove_image(docker, tiny["id"])


def test_create_writes_chunks_manifest_and_sums_that_coreutils_checks(
    bundle: Path, tiny: dict[str, str], sglx_json: JsonRunner
) -> None:
    from sglx.ansible_vars import vars_text
    from sglx_core.profile import load_profile

    manifest = json.loads((bundle / "bundle.json").read_text())
    assert manifest["arch"] == "cpu"
    assert manifest["image"]["id"] == tiny["id"]
    chunks = manifest["image"]["chunks"]
    assert len(chunks) >= 3
    assert chunks == [f"image/image.tar.{i:03d}" for i in range(len(chunks))]
    listed = {entry["path"] for entry in manifest["files"]}
    assert {"install.sh", "meta/versions.json", "meta/labels.json", *chunks} <= listed
    # the profile the image was made with and the run spec every installer reads (issue 23)
    assert {"meta/arch.yaml", "meta/run.json"} <= listed
    # The Ansible slot: playbooks, roles, the rendered cpu variables, host checks and the lock.
    assert manifest["ansible"]["included"] is True
    assert manifest["ansible"]["path"] == "ansible"
    assert "wheels are not included" in manifest["ansible"]["note"]
    kinds = {e["path"]: e["kind"] for e in manifest["files"] if e["path"].startswith("ansible/")}
    assert kinds.pop("ansible/control-node.txt") == "lock"
    assert set(kinds.values()) == {"ansible"}
    for path in (
        "ansible/site.yml",
        "ansible/rollout.yml",
        "ansible/ansible.cfg",
        "ansible/roles/sglang_service/tasks/main.yml",
        "ansible/host-checks/conftest.py",
        "ansible/host-checks/pytest.ini",
    ):
        assert path in kinds
    rendered = bundle / "ansible/inventory/example/group_vars/cpu/sglx_profile.yml"
    assert rendered.read_text() == vars_text(load_profile("cpu"))
    code, envelope = sglx_json("bundle", "verify", str(bundle), "--no-scan", "-q")
    assert (code, envelope["findings"]) == (0, [])
    check = subprocess.run(
        ["sha256sum", "-c", "--strict", "SHA256SUMS"], cwd=bundle, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "bundle.json: OK" in check.stdout
    assert not [p for p in bundle.parent.iterdir() if ".partial-" in p.name]


def test_create_never_overwrites_and_names_a_missing_image(sglx: CliRunner, bundle: Path) -> None:
    code, out, err = sglx("bundle", "create", "--arch", "cpu", "--image", "x", "--out", str(bundle))
    assert code == 2
    assert "no image 'x' in the local Docker engine" in err
    assert "Traceback" not in out + err


def test_round_trip_then_a_second_install_redoes_nothing(
    sglx_json: JsonRunner, bundle: Path, tmp_path: Path, docker: Any, tiny: dict[str, str]
) -> None:
    code, envelope = sglx_json("bundle", "verify", str(bundle), "--no-scan", "-q")
    assert (code, envelope["findings"]) == (0, [])
    assert envelope["data"]["files"] >= 5
    state = tmp_path / "state"
    code, first = sglx_json(
        "bundle", "install", "--no-scan", str(bundle), "--state", str(state), "-q"
    )
    assert code == 0, first
    assert first["data"]["redone"] == ["verify", "image"]
    assert has_image(docker, tiny["id"])
    code, second = sglx_json(
        "bundle", "install", "--no-scan", str(bundle), "--state", str(state), "-q"
    )
    assert code == 0
    assert second["data"]["redone"] == []
    assert {name: row["status"] for name, row in second["data"]["steps"].items()} == {
        "verify": "skipped",
        "image": "skipped",
        "venv": "not asked",
        "weights": "not asked",
    }
    code, full = sglx_json(
        "bundle", "install", "--no-scan", str(bundle), "--state", str(state), "--full", "-q"
    )
    assert code == 0
    assert full["data"]["steps"]["verify"]["status"] == "done"
    docker_run = first["data"]["docker_run"]
    assert docker_run[:2] == ["docker", "run"] and docker_run[-1] == tiny["tag"]
    assert "--shm-size" in docker_run
    # what the line starts, named in the server's environment: the image and this bundle (the
    # digest of its bundle.json, which the install record is named by)
    digest = "sha256:" + hashlib.sha256((bundle / "bundle.json").read_bytes()).hexdigest()
    assert f"SGLX_BUNDLE_DIGEST={digest}" in docker_run, docker_run
    assert f"SGLX_IMAGE_ID={tiny['id']}" in docker_run, docker_run
    assert (state / f"{digest.replace(':', '-')}.json").is_file()


def flip_byte(bundle: Path) -> None:
    path = bundle / "image/image.tar.001"
    data = bytearray(path.read_bytes())
    data[1000] ^= 0xFF
    path.write_bytes(bytes(data))


def truncate(bundle: Path) -> None:
    path = bundle / "image/image.tar.002"
    path.write_bytes(path.read_bytes()[:-10])


def tamper_manifest(bundle: Path) -> None:
    path = bundle / "bundle.json"
    path.write_text(path.read_text().replace('"arch": "cpu"', '"arch": "gfx942"'))


def tamper_sums(bundle: Path) -> None:
    path = bundle / "SHA256SUMS"
    lines = path.read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if line.endswith("  image/image.tar.000"))
    lines[first] = "0" * 64 + lines[first][64:]
    path.write_text("\n".join(lines) + "\n")


CORRUPTIONS = [
    (
        flip_byte,
        "chunk 1 of image.tar (image/image.tar.001) does not match its sha256",
        "re-copy chunk 1 of image.tar (image/image.tar.001) from the source side",
    ),
    (
        truncate,
        "chunk 2 of image.tar (image/image.tar.002) is ",
        "re-copy chunk 2 of image.tar (image/image.tar.002) from the source side",
    ),
    (
        lambda b: (b / "image/image.tar.000").unlink(),
        "chunk 0 of image.tar (image/image.tar.000) is missing",
        "re-copy chunk 0 of image.tar",
    ),
    (lambda b: (b / "install.sh").unlink(), "install.sh is missing", "re-copy install.sh"),
    (
        lambda b: (b / "meta/notes.txt").write_text("hi"),
        "meta/notes.txt is not part of the bundle",
        "remove it",
    ),
    (
        tamper_manifest,
        "bundle.json does not match its sha256 in SHA256SUMS",
        "the bundle was tampered with: do not install it",
    ),
    (
        tamper_sums,
        "SHA256SUMS does not agree with bundle.json on: image/image.tar.000",
        "re-copy bundle.json and SHA256SUMS",
    ),
    (
        lambda b: (b / "bundle.json").write_text("{broken"),
        "bundle.json: the bundle manifest is not valid JSON",
        "re-copy bundle.json",
    ),
]


@pytest.mark.parametrize(("damage", "message", "hint"), CORRUPTIONS)
def test_each_corruption_is_named_and_nothing_is_installed(
    sglx: CliRunner,
    bundle: Path,
    tmp_path: Path,
    docker: Any,
    tiny: dict[str, str],
    damage: Callable[[Path], Any],
    message: str,
    hint: str,
) -> None:
    damage(bundle)
    code, out, err = sglx("bundle", "verify", str(bundle), "--no-scan", "-q")
    assert code == 1
    assert message in out
    assert hint in out
    assert "Traceback" not in out + err
    code, out, err = sglx(
        "bundle", "install", "--no-scan", str(bundle), "--state", str(tmp_path / "s"), "-q"
    )
    assert code == 1
    assert message in out
    assert "nothing was installed: the bundle did not verify" in out
    assert "Traceback" not in out + err
    assert not has_image(docker, tiny["id"])


def test_a_damaged_chunk_is_found_by_install_even_after_a_good_install(
    sglx_json: JsonRunner, bundle: Path, tmp_path: Path
) -> None:
    """The install record cannot be forged by editing the bundle: the edit changes the file."""
    state = str(tmp_path / "state")
    assert sglx_json("bundle", "install", "--no-scan", str(bundle), "--state", state, "-q")[0] == 0
    flip_byte(bundle)
    code, envelope = sglx_json(
        "bundle", "install", "--no-scan", str(bundle), "--state", state, "-q"
    )
    assert code == 1
    assert [f["path"] for f in envelope["findings"]] == ["image/image.tar.001"]


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("keys")
    out: dict[str, Path] = {}
    for name in ("site", "other"):
        key = folder / name
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)], check=True
        )
        public = (folder / f"{name}.pub").read_text().split()
        (folder / f"{name}.allowed").write_text(f"{name}@sglx {public[0]} {public[1]}\n")
        out[name] = key
        out[f"{name}.allowed"] = folder / f"{name}.allowed"
    return out


@pytest.fixture(scope="module")
def signed(
    tiny: dict[str, str], pristine: Path, docker: Any, keys: dict[str, Path]
) -> Iterator[Path]:
    from sglx.cli import main

    out = pristine.parent / "signed"
    # `pristine` removed the image from the engine; bring it back from the bundle to sign anew.
    assert (
        main(
            ["bundle", "install", "--no-scan", str(pristine), "--state", str(out) + ".state", "-q"]
        )
        == 0
    )
    args = ["bundle", "create", "--arch", "cpu", "--image", tiny["tag"], "--out", str(out)]
    assert main([*args, "--chunk-size", CHUNK, "--no-scan", "--sign", str(keys["site"]), "-q"]) == 0
    remove_image(docker, tiny["id"])
    yield out
    shutil.rmtree(out, ignore_errors=True)


def test_a_good_signature_verifies(
    sglx_json: JsonRunner, signed: Path, keys: dict[str, Path]
) -> None:
    code, envelope = sglx_json(
        "bundle", "verify", str(signed), "--no-scan", "--require-signature",
        "--allowed-signers", str(keys["site.allowed"]), "--identity", "site@sglx", "-q",
    )  # fmt: skip
    assert (code, envelope["findings"]) == (0, [])
    assert envelope["data"]["signed"] and envelope["data"]["signature_checked"]
    check = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=signed, capture_output=True)
    assert check.returncode == 0
    assert b"bundle.json.sig: OK" in check.stdout


def test_a_signature_by_an_untrusted_key_is_refused(
    sglx: CliRunner, signed: Path, keys: dict[str, Path], tmp_path: Path
) -> None:
    allowed = str(keys["other.allowed"])
    code, out, err = sglx(
        "bundle", "verify", str(signed), "--no-scan", "--allowed-signers", allowed
    )
    assert code == 1
    assert "the signature of bundle.json is not valid" in out
    assert "do not install this bundle" in out
    assert "Traceback" not in out + err
    code, out, _ = sglx(
        "bundle", "install", "--no-scan", str(signed), "--state", str(tmp_path / "s"),
        "--allowed-signers", allowed, "-q",
    )  # fmt: skip
    assert code == 1
    assert "nothing was installed" in out


def test_an_unsigned_bundle_is_refused_where_signatures_are_required(
    sglx: CliRunner, bundle: Path, keys: dict[str, Path]
) -> None:
    code, out, err = sglx(
        "bundle", "verify", str(bundle), "--no-scan", "--require-signature",
        "--allowed-signers", str(keys["site.allowed"]),
    )  # fmt: skip
    assert code == 1
    assert "the bundle is not signed (no bundle.json.sig) and this site requires signatures" in out
    assert "sglx bundle create --sign KEY" in out
    assert "Traceback" not in out + err


def test_the_tar_form_round_trips_and_is_checked(
    sglx_json: JsonRunner, tiny: dict[str, str], pristine: Path, tmp_path: Path, docker: Any
) -> None:
    state = str(tmp_path / "state")
    assert (
        sglx_json("bundle", "install", "--no-scan", str(pristine), "--state", state, "-q")[0] == 0
    )
    out = tmp_path / "tarred"
    code, created = sglx_json(
        "bundle", "create", "--arch", "cpu", "--image", tiny["tag"], "--out", str(out),
        "--chunk-size", CHUNK, "--no-scan", "--tar", "-q",
    )  # fmt: skip
    assert code == 0, created
    tar = Path(created["data"]["tar"])
    shutil.rmtree(out)
    remove_image(docker, tiny["id"])
    code, envelope = sglx_json("bundle", "install", "--no-scan", str(tar), "--state", state, "-q")
    assert code == 0, envelope
    assert envelope["data"]["steps"]["image"]["status"] == "done"
    # beside the tar: the copy of its install.sh that `create --tar` writes
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["state", "tarred.install.sh", "tarred.tar"]
    tar.unlink()


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB filesystem: too small for the demo weights (~0.5 MB) or any bundle."""
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], check=True)
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


@pytest.fixture(scope="module")
def demo_weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from sglx.cli import main

    folder = tmp_path_factory.mktemp("weights")
    assert main(["model", "demo", str(folder / "demo"), "-q"]) == 0
    assert main(["weights", "convert", str(folder / "demo"), str(folder / "demo-cpu"), "-q"]) == 0
    return folder / "demo-cpu"


@pytest.fixture(scope="module")
def with_weights(
    tiny: dict[str, str], pristine: Path, docker: Any, demo_weights: Path
) -> Iterator[Path]:
    from sglx.cli import main

    out = pristine.parent / "with-weights"
    assert (
        main(
            ["bundle", "install", "--no-scan", str(pristine), "--state", str(out) + ".state", "-q"]
        )
        == 0
    )
    args = ["bundle", "create", "--arch", "cpu", "--image", tiny["tag"], "--out", str(out)]
    weights = ["--weights-outside", str(demo_weights)]
    assert main([*args, *weights, "--chunk-size", CHUNK, "--no-scan", "-q"]) == 0
    remove_image(docker, tiny["id"])
    yield out
    shutil.rmtree(out, ignore_errors=True)


def test_too_little_space_is_named_before_anything_is_written(
    sglx: CliRunner, with_weights: Path, tmpfs: Path, tmp_path: Path, docker: Any,
    tiny: dict[str, str],
) -> None:  # fmt: skip
    state = tmp_path / "state"
    code, out, err = sglx(
        "bundle",
        "install",
        "--no-scan",
        str(with_weights),
        "--state",
        str(state),
        "--weights-dir",
        str(tmpfs),
    )
    assert code == 2
    assert "installing the bundle needs 5" in err
    assert f"on the filesystem of {tmpfs}, which has 256.0 KiB free; nothing was written" in err
    assert "Traceback" not in out + err
    assert not has_image(docker, tiny["id"])
    assert list(tmpfs.iterdir()) == []
    assert not state.exists()
    code, out, err = sglx(
        "bundle", "create", "--arch", "cpu", "--image", tiny["tag"], "--out", str(tmpfs / "b")
    )
    # The image is not in the engine any more: create says so before it checks space.
    assert code == 2 and "no image" in err


def test_weights_outside_are_placed_once_and_atomically(
    sglx_json: JsonRunner, with_weights: Path, tmp_path: Path, demo_weights: Path
) -> None:
    from sglx_core.weights_manifest import manifest_digest

    state, target = str(tmp_path / "state"), tmp_path / "weights"
    args = (
        "bundle",
        "install",
        "--no-scan",
        str(with_weights),
        "--state",
        state,
        "--weights-dir",
        str(target),
    )
    code, first = sglx_json(*args, "-q")
    assert code == 0, first
    assert first["data"]["steps"]["weights"]["status"] == "done"
    assert manifest_digest(target / "demo-cpu") == manifest_digest(demo_weights)
    assert f"{target / 'demo-cpu'}:/models/model:ro" in first["data"]["docker_run"]
    code, second = sglx_json(*args, "-q")
    assert (code, second["data"]["redone"]) == (0, [])


def wait_for(proc: subprocess.Popen[str], words: str) -> str:
    assert proc.stderr is not None
    for line in proc.stderr:
        if words in line:
            return line
    raise AssertionError(f"the install ended before printing {words!r}")


@pytest.fixture(scope="module")
def big(
    docker: Any, run_id: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """A 48 MB image and ~60 MB of weights in 8 MB shards, so a kill lands mid-step."""
    from sglx.cli import main
    from sglx.demo_model import ModelShape, make_demo_model

    tag = f"sglx-test/bundle-big:{run_id}"
    image_id = import_tiny_image(docker, tag, blob_bytes=48_000_000)
    folder = tmp_path_factory.mktemp("big")
    shape = ModelShape(hidden_size=512, intermediate_size=2048, num_hidden_layers=4)
    make_demo_model(folder / "demo", shape=shape, max_shard_size="8MB")
    assert main(["weights", "convert", str(folder / "demo"), str(folder / "big-cpu"), "-q"]) == 0
    shutil.rmtree(folder / "demo")
    out = folder / "bundle"
    args = ["bundle", "create", "--arch", "cpu", "--image", tag, "--out", str(out)]
    weights = ["--weights-outside", str(folder / "big-cpu")]
    assert main([*args, *weights, "--chunk-size", "8MiB", "--no-scan", "-q"]) == 0
    remove_image(docker, image_id)
    yield {"tag": tag, "id": image_id, "bundle": out}
    remove_image(docker, image_id)
    shutil.rmtree(folder, ignore_errors=True)


def test_an_install_killed_during_the_load_and_the_weights_completes_on_rerun(
    big: dict[str, Any], tmp_path: Path, docker: Any, sglx_json: JsonRunner
) -> None:
    state, target = tmp_path / "state", tmp_path / "weights"
    args = ("bundle", "install", "--no-scan", str(big["bundle"]), "--state", str(state))
    args += ("--weights-dir", str(target))
    proc = sglx_process(*args)
    wait_for(proc, "loading sglx-test/bundle-big")
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    assert not (target / "big-cpu").exists()

    proc = sglx_process(*args)
    wait_for(proc, "placed 1/")
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    assert has_image(docker, big["id"])
    assert [p.name.split(".partial-")[0] for p in target.iterdir()] == [".big-cpu"]

    code, envelope = sglx_json(*args, "-q")
    assert code == 0, envelope
    steps = {name: row["status"] for name, row in envelope["data"]["steps"].items()}
    assert steps == {
        "verify": "skipped",
        "image": "skipped",
        "venv": "not asked",
        "weights": "done",
    }
    assert [p.name for p in target.iterdir()] == ["big-cpu"]
    assert big["id"] in image_ids(docker)
    assert docker.images.get(big["id"]).tags == [big["tag"]]


def test_scan_reads_the_bundle_format(sglx_json: JsonRunner, bundle: Path) -> None:
    """With no --arch, the bundle's own profile (meta/arch.yaml) sets the rules: the tiny
    image lacks the libraries the cpu profile requires, and says so."""
    code, envelope = sglx_json("scan", "--bundle", str(bundle), "-q")
    assert code == 1, envelope
    assert envelope["data"]["source"] == {"kind": "bundle", "path": str(bundle)}
    [scan] = envelope["data"]["scans"]
    assert (scan["kind"], scan["arch"]) == ("image_archive", "cpu")
    assert envelope["findings"] and all(
        f["message"].startswith("no library matching") for f in envelope["findings"]
    )


def test_create_scans_the_image_it_wrote_and_keeps_the_report(
    sglx_json: JsonRunner, docker: Any, run_id: str, tmp_path: Path
) -> None:
    """Create runs its image scan on the archive it wrote (the default; the session's cpu
    bundle is made without it, and test_bundle_cpu's verify runs the same scan on it): the
    report lands in meta/scan.json and its findings in create's own."""
    tag = f"sglx-test/bundle-tiny-scanned:{run_id}"
    import_tiny_image(docker, tag, blob_bytes=1000)
    out = tmp_path / "scanned"
    statements = tmp_path / "site.vex.json"
    statements.write_text(json.dumps({"statements": [{"vulnerability": {"name": "CVE-1"},
                          "products": ["pkg:pypi/x"], "status": "not_affected"}]}))  # fmt: skip
    try:
        code, envelope = sglx_json("bundle", "create", "--arch", "cpu", "--image", tag,
                                   "--out", str(out), "--chunk-size", CHUNK, "--vex",
                                   str(statements), "-q")  # fmt: skip
    finally:
        remove_image(docker, tag)
    # The tiny image lacks what the cpu profile requires: create says so, exit 1 (findings),
    # and still writes the bundle with its report.
    assert (code, envelope["data"]["scan"]) == (1, "findings"), envelope
    assert all(f["message"].startswith("image scan: ") for f in envelope["findings"])
    report = json.loads((out / "meta" / "scan.json").read_text())
    assert report["data"]["source"]["kind"] == "image"
    assert {f["code"] for f in report["findings"]} == {f["code"] for f in envelope["findings"]}
    # The SBOM of the same unpacked root, under SHA256SUMS; `bundle inspect` sums it up.
    sbom = (out / "meta" / "sbom.cdx.json").read_text()
    assert validation_error(sbom) is None
    assert "meta/sbom.cdx.json" in (out / "SHA256SUMS").read_text()
    subject = json.loads(sbom)["metadata"]["component"]
    assert (subject["name"], subject["type"]) == (tag, "container")
    code, inspected = sglx_json("bundle", "inspect", str(out))
    assert code == 0 and inspected["data"]["sbom"]["path"] == "meta/sbom.cdx.json", inspected
    # ... and writes it as SPDX 2.3 for a site that reads SPDX.
    spdx = tmp_path / "sbom.spdx.json"
    code, written = sglx_json("bundle", "sbom", str(out), "--format", "spdx", "--out", str(spdx))
    assert (code, written["data"]["format"]) == (0, "spdx"), written
    assert json.loads(spdx.read_text())["spdxVersion"] == "SPDX-2.3"
    # The audit reads that SBOM and the carried VEX, offline, against a database given here.
    db = tmp_path / "osv"
    db.mkdir()
    (db / "GHSA-1.json").write_text(json.dumps({"id": "GHSA-1", "affected": [
        {"package": {"ecosystem": "PyPI", "name": "x"}, "versions": ["1"]}]}))  # fmt: skip
    assert "meta/vex.json" in (out / "SHA256SUMS").read_text()
    code, audited = sglx_json("bundle", "audit", str(out), "--db", str(db), "--fail-on", "low")
    assert (code, audited["data"]["database"]["advisories_read"]) == (0, 1), audited
    (out / "meta" / "vex.json").write_text("{}")  # not what bundle.json says: refused
    code, audited = sglx_json("bundle", "audit", str(out), "--db", str(db))
    assert code == 2 and "does not match its sha256" in audited["errors"][0]["message"]


def test_an_image_built_with_another_profile_is_refused_naming_both_digests(
    sglx: CliRunner, docker: Any, run_id: str, tmp_path: Path
) -> None:
    """The bundle carries its profile (meta/arch.yaml); an image whose io.sglx.profile.digest
    label names another one is refused before anything is written."""
    from sglx_core.profile import load_profile
    from sglx_core.profile.resolved import PROFILE_DIGEST_LABEL, profile_digest

    other = "sha256:" + "f" * 64
    tag = f"sglx-test/bundle-tiny-other-profile:{run_id}"
    import_tiny_image(docker, tag, blob_bytes=1000, labels={PROFILE_DIGEST_LABEL: other})
    try:
        out = tmp_path / "bundle"
        code, _, err = sglx("bundle", "create", "--arch", "cpu", "--image", tag, "--out", str(out),
                            "--no-scan", "-q")  # fmt: skip
    finally:
        remove_image(docker, tag)
    assert code != 0
    assert other in err and profile_digest(load_profile("cpu")) in err
    assert "sglx image build --arch cpu" in err and "Traceback" not in err
    assert not out.exists()


def test_a_tuned_set_is_carried_checked_for_the_arch_and_verified(
    sglx_json: JsonRunner, docker: Any, run_id: str, tmp_path: Path
) -> None:
    """`bundle create --tuned`: the set's files and manifest at tuned/, its digest in
    bundle.json, covered by SHA256SUMS (verify passes, and finds an edited table). A set of
    another arch is refused before anything is written."""
    from helpers.bundles import import_tiny_image
    from helpers.tuned_files import write_tuning_run

    from sglx_core import tuned
    from sglx_core.profile import load_profile

    tag = f"sglx-test/bundle-tuned:{run_id}"
    image_id = import_tiny_image(docker, tag, blob_bytes=10_000)
    try:
        run = write_tuning_run(tmp_path / "run")
        made, _ = tuned.capture(run, tmp_path / "set", load_profile("gfx942"),
                                captured_from="t", host="h", sglx="t")  # fmt: skip
        out = tmp_path / "bundle"
        args = ["bundle", "create", "--arch", "gfx942", "--image", tag, "--no-scan", "-q"]
        code, envelope = sglx_json(*args, "--out", str(out), "--tuned", str(tmp_path / "set"))
        assert code == 0, envelope
        manifest = json.loads((out / "bundle.json").read_text())
        assert manifest["tuned"] == {"digest": made.digest, "path": "tuned"}
        carried = {e["path"]: e["kind"] for e in manifest["files"] if e["kind"] == "tuned"}
        assert set(carried) == {f"tuned/{p.name}" for p in (tmp_path / "set").iterdir()}
        assert tuned.load(out / "tuned", load_profile("gfx942")).digest == made.digest
        code, envelope = sglx_json("bundle", "verify", str(out), "--no-scan", "-q")
        assert code == 0, envelope
        (out / "tuned" / "hipblaslt_tuning.txt").write_text("Git Version: other\n")
        code, envelope = sglx_json("bundle", "verify", str(out), "--no-scan", "-q")
        assert code == 1 and "tuned/hipblaslt_tuning.txt" in json.dumps(envelope), envelope
        # The gfx950 profile refuses the gfx942 set: nothing is written.
        other = ["--out", str(tmp_path / "other"), "--tuned", str(tmp_path / "set")]
        code, envelope = sglx_json(*args[:3], "gfx950", *args[4:], *other)
        assert code == 2 and envelope["errors"][0]["code"] == "wrong_arch", envelope
        assert not (tmp_path / "other").exists()
    finally:
        remove_image(docker, image_id)
