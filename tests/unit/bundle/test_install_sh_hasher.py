"""install.sh's hasher: `openssl dgst -sha256` when an openssl on PATH passes its known-answer
test, coreutils' `sha256sum` otherwise. The generated script runs with `--check` on a
hand-made bundle under a PATH that is only a folder of links to the tools named here, so the
test, not this machine, decides which hashers exist; each hasher passes an intact bundle and
names the one chunk whose byte was changed. Each case runs under the three shells a site's
host may have as `sh`: dash (Debian, Ubuntu), bash (RHEL's /bin/sh) and BusyBox's ash (a
minimal host); Debian's `busybox` package, installed by scripts/bootstrap.sh."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers.bundles import hand_bundle

from sglx.bundle import install_sh
from sglx_core.profile import load_profile

# What `install.sh --check` runs on a bundle folder besides the shell and the hashers.
TOOLS = (
    "cat", "comm", "cp", "cut", "dirname", "du", "grep", "head", "mktemp", "rm", "sed",
    "sort", "tr", "uniq", "wc",
)  # fmt: skip
CHUNKS = ("image/image.tar.000", "image/image.tar.001", "image/image.tar.002")
BROKEN_OPENSSL = "#!/bin/sh\necho 'SHA256(stdin)= 0'\n"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("hasher")
    script = install_sh.render(
        load_profile("cpu"), version="test", image_ref="sglx-test/hasher:1",
        image_id="sha256:" + "0" * 64, chunks=CHUNKS, weights_path=None,
    )  # fmt: skip
    archive = where / "image.tar"
    archive.write_bytes(os.urandom(10_000))
    folder: Path = hand_bundle(
        where / "bundle", archive, {"install.sh": script.encode()}, chunk_size=4096
    )
    assert sorted(p.name for p in (folder / "image").iterdir()) == [
        c.rsplit("/", 1)[1] for c in CHUNKS
    ]
    return folder


def tool_folder(where: Path, hashers: dict[str, str | None]) -> Path:
    """A folder of links to TOOLS and to each hasher named (None: this machine's; text: a
    script of that text in its place)."""
    where.mkdir()
    for name in TOOLS:
        found = shutil.which(name)
        assert found is not None, f"{name} is needed to run install.sh"
        (where / name).symlink_to(found)
    for name, text in hashers.items():
        if text is None:
            found = shutil.which(name)
            if found is None:
                pytest.skip(f"{name} is not installed here")
            (where / name).symlink_to(found)
        else:
            (where / name).write_text(text)
            (where / name).chmod(0o755)
    return where


# The shells install.sh must run under: argv before the script.
SHELLS = {"dash": ["dash"], "bash": ["bash", "--posix"], "busybox": ["busybox", "sh"]}


@pytest.fixture(params=list(SHELLS))
def shell(request: pytest.FixtureRequest) -> list[str]:
    argv = SHELLS[request.param]
    found = shutil.which(argv[0])
    assert found is not None, f"{argv[0]} is needed (scripts/bootstrap.sh installs it)"
    return [found, *argv[1:]]


def check(bundle: Path, tools: Path, shell: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*shell, "install.sh", "--check"], cwd=bundle, capture_output=True, text=True,
        timeout=60, env={"PATH": str(tools), "LC_ALL": "C"},
    )  # fmt: skip


@pytest.mark.parametrize(
    ("hashers", "picked"),
    [
        ({"openssl": None}, "openssl"),
        ({"sha256sum": None}, "sha256sum"),
        ({"openssl": BROKEN_OPENSSL, "sha256sum": None}, "sha256sum"),
    ],
    ids=["openssl-only", "sha256sum-only", "broken-openssl"],
)
def test_each_hasher_passes_a_bundle_and_names_a_changed_chunk(
    bundle: Path, tmp_path: Path, hashers: dict[str, str | None], picked: str, shell: list[str]
) -> None:
    tools = tool_folder(tmp_path / "bin", hashers)
    done = check(bundle, tools, shell)
    assert done.returncode == 0, done.stderr
    assert f"install.sh: checking 6 files against SHA256SUMS ({picked})\n" in done.stderr
    assert "install.sh: all files match" in done.stderr

    damaged = tmp_path / "damaged"
    shutil.copytree(bundle, damaged)
    chunk = damaged / CHUNKS[1]
    data = bytearray(chunk.read_bytes())
    data[1000] ^= 0x01
    chunk.write_bytes(bytes(data))
    (damaged / CHUNKS[2]).unlink()
    done = check(damaged, tools, shell)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    assert f"{CHUNKS[1]}: FAILED" in lines
    assert f"{CHUNKS[2]}: FAILED open or read" in lines
    assert (
        "install.sh: error: files of the bundle do not match SHA256SUMS: "
        f"{CHUNKS[1]} {CHUNKS[2]} (each listed FAILED above)"
    ) in lines
    assert not any(line.endswith(f"{CHUNKS[0]}: FAILED") for line in lines)
    assert "all files match" not in done.stderr


def test_no_hasher_is_a_missing_tool(bundle: Path, tmp_path: Path, shell: list[str]) -> None:
    done = check(bundle, tool_folder(tmp_path / "bin", {}), shell)
    assert done.returncode == 2, done.stderr
    assert "install.sh: error: sha256sum not found" in done.stderr
