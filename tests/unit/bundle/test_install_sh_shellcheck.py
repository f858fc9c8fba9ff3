"""install.sh as sglx renders it, for every arch and every part a bundle can switch on
(weights carried beside the image, a delta over a parent, with the weights its parent placed,
the base's layers left out), passes ShellCheck (Debian's `shellcheck`, installed by
scripts/bootstrap.sh; POSIX sh dialect) with no finding, and dash's parse (`dash -n`). The
template's two directives say why at its top; any other finding fails here, naming its line
of the rendered script. So does each arch's images/<arch>/deps.sh, and each template in
sglx/bundle/sh/ as it is in the repository.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from sglx.bundle import install_sh
from sglx.bundle.layers import chain_ids
from sglx.bundle.manifest import ImageRecord, WeightsFile, WeightsRecord
from sglx.image.render import render_deps_script
from sglx_core.profile import known_arches, load_profile

IMAGE_ID = "sha256:" + "0" * 64
DIFFS = ["sha256:" + c * 64 for c in "abc"]
FILES = (WeightsFile(name="model.safetensors", size=4, sha256=hashlib.sha256(b"abcd").hexdigest()),)


def _image(**parts: object) -> ImageRecord:
    layers = [
        {"diff_id": diff, "chain_id": chain, "size": 1000, "carried": i == 2}
        for i, (diff, chain) in enumerate(zip(DIFFS, chain_ids(DIFFS), strict=True))
    ]
    return ImageRecord.model_validate_json(json.dumps(
        {"ref": "sglx/cpu:2", "id": IMAGE_ID, "archive": "image/image.tar", "size": 3000,
         "chunk_size": 1 << 20, "chunks": ["image/image.tar.000"], "layers": layers, **parts}
    ))  # fmt: skip


WEIGHTS = {"name": "demo", "digest": "sha256:" + "f" * 64, "size": 4, "files": FILES}


def _weights(**parts: object) -> WeightsRecord:
    return WeightsRecord(**{**WEIGHTS, **parts})  # type: ignore[arg-type]


DELTA = _image(
    parent={"digest": "sha256:" + "d" * 64, "bundle": "sglx-cpu-1", "image_ref": "sglx/cpu:1",
            "image_id": "sha256:" + "1" * 64}
)  # fmt: skip
VARIANTS: dict[str, dict[str, object]] = {
    "plain": {},
    "weights carried": {"weights": _weights(path="weights/demo"), "weights_files": FILES},
    "delta": {"image": DELTA},
    "delta with the parent's weights": {
        "image": DELTA,
        "weights": _weights(path=None, carried=False),
        "weights_files": FILES,
    },
    "base left out": {
        "image": _image(
            base={
                "ref": "rocm/base:1",
                "image_id": "sha256:" + "e" * 64,
                "layers": 2,
                "obtain": "docker load -i base.tar",
            }
        )
    },
}
CASES = [(arch, "plain") for arch in known_arches()]
CASES += [("cpu", variant) for variant in VARIANTS if variant != "plain"]


@pytest.mark.parametrize(("arch", "variant"), CASES, ids=[f"{a}-{v}" for a, v in CASES])
def test_install_sh_passes_shellcheck(tmp_path: Path, arch: str, variant: str) -> None:
    parts = VARIANTS[variant]
    image = parts.get("image")
    script = install_sh.render(
        load_profile(arch), version="test", image_ref="sglx/cpu:2", image_id=IMAGE_ID,
        chunks=image.chunks if isinstance(image, ImageRecord) else ("image/image.tar.000",),
        **parts,  # type: ignore[arg-type]
    )  # fmt: skip
    _assert_clean(tmp_path / "install.sh", script)


TEMPLATES = sorted(p.name for p in (Path(install_sh.__file__).parent / "sh").glob("*.sh"))
# A part of install.sh reads variables another part sets (SC2154, SC2034); SC2015 is disabled
# at install.sh's top, for every part, with its reason.
PARTS_OF_ONE_SCRIPT = "SC2154,SC2034,SC2015"


@pytest.mark.parametrize("name", TEMPLATES)
def test_each_template_is_plain_sh_that_shellcheck_reads(name: str) -> None:
    """The templates in sglx/bundle/sh/ as they are in the repository, placeholders and all:
    what an editor and a reviewer read is shell that ShellCheck and dash accept."""
    path = Path(install_sh.__file__).parent / "sh" / name
    checked = subprocess.run(
        ["shellcheck", "--shell=sh", "--format=gcc", f"--exclude={PARTS_OF_ONE_SCRIPT}",
         str(path)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert checked.returncode == 0 and not checked.stdout, checked.stdout + checked.stderr
    parsed = subprocess.run(["dash", "-n", str(path)], capture_output=True, text=True)
    assert parsed.returncode == 0, parsed.stderr


@pytest.mark.parametrize("arch", known_arches())
def test_deps_sh_passes_shellcheck(tmp_path: Path, arch: str) -> None:
    """images/<arch>/deps.sh, which installs the venv in a container of the base."""
    _assert_clean(tmp_path / "deps.sh", render_deps_script(load_profile(arch)))


def _assert_clean(path: Path, script: str) -> None:
    path.write_text(script)
    checked = subprocess.run(
        ["shellcheck", "--shell=sh", "--format=gcc", str(path)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    findings = checked.stdout.replace(f"{path}:", "line ")
    assert checked.returncode == 0 and not findings, findings + checked.stderr
    parsed = subprocess.run(["dash", "-n", str(path)], capture_output=True, text=True)
    assert parsed.returncode == 0, parsed.stderr
