"""docs/reference/hardware-runs.md, the manual coverage CI cannot give (seed item S4-46), stays
true to the tree: every path it names exists, every arch with a vendor base is named, and every
test that only runs on an accelerator lies where the list tells the maintainer to run.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PAGE = REPO / "docs" / "reference" / "hardware-runs.md"
# A path of this repository in backticks: a test, a helper, a profile, a results file.
NAMED_PATH = re.compile(
    r"`((?:tests|images|bench|plugin|runtime|scripts|kernels)/[A-Za-z0-9_./-]+)`"
)
GPU_ONLY = re.compile(r"pytest\.mark\.gpu\b|requires_gpu\b")


def test_every_path_the_page_names_exists() -> None:
    named = NAMED_PATH.findall(PAGE.read_text())
    assert named, "the page names no path: the pattern no longer matches its style"
    missing = [path for path in named if not (REPO / path).exists()]
    assert not missing, f"hardware-runs.md names paths that do not exist: {missing}"


def test_every_arch_with_a_vendor_base_is_named() -> None:
    text = PAGE.read_text()
    arches = sorted(p.parent.name for p in (REPO / "images").glob("*/arch.yaml"))
    assert "cpu" in arches
    unnamed = [arch for arch in arches if arch != "cpu" and arch not in text]
    assert not unnamed, f"hardware-runs.md does not say how to run {unnamed} on hardware"


def test_every_accelerator_only_test_is_in_a_folder_the_page_runs() -> None:
    text = PAGE.read_text()
    folders = {path.rstrip("/") for path in NAMED_PATH.findall(text) if (REPO / path).is_dir()}
    gpu_only = [
        path.relative_to(REPO)
        for path in sorted((REPO / "tests").rglob("*.py"))
        if GPU_ONLY.search(path.read_text()) and path != Path(__file__).resolve()
    ]
    assert gpu_only, "no accelerator-only test found: the pattern no longer matches the marks"
    outside = [
        str(path) for path in gpu_only if not any(str(path).startswith(f + "/") for f in folders)
    ]
    assert not outside, f"accelerator-only tests the hardware list does not run: {outside}"
