"""The layering contracts `make lint` checks (`lint-imports`, pyproject's [tool.importlinter]):
the plugin, the image runtime and the kernels stand on sglx_core only, the platform plugin on
nothing of the runtime, the core on nothing of sglx's, the host checks on the host tool and the
core and nothing on them, the scan on no bundle layout, and the host tool's packages in layers.

Shown on a copy of the packages, so the contract is seen to break, naming the import, when a
plugin module imports the host tool, and to hold on the tree as it is."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
PACKAGES = {
    "sglx": "scripts",
    "sglx_core": "scripts",
    "sglx_platform": "plugin",
    "sglx_runtime": "runtime",
    "sglx_kernels": "kernels",
    "hostchecks": ".",
}


def copy_packages(dest: Path) -> list[Path]:
    """The six packages' *.py files under dest/<folder>/<package>; their sys.path entries."""
    for package, folder in PACKAGES.items():
        shutil.copytree(
            REPO / folder / package,
            dest / folder / package,
            ignore=lambda _d, names: [n for n in names if n == "__pycache__" or (
                "." in n and not n.endswith(".py"))],
        )  # fmt: skip
    shutil.copy2(REPO / "pyproject.toml", dest / "pyproject.toml")
    return sorted({dest / folder for folder in PACKAGES.values()})


def lint_imports(root: Path, paths: list[Path]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, paths))}
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(root / "pyproject.toml"), "--no-cache"],
        cwd=root, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, list[Path]]:
    return tmp_path, copy_packages(tmp_path)


def test_the_tree_keeps_every_contract(tree: tuple[Path, list[Path]]) -> None:
    root, paths = tree
    done = lint_imports(root, paths)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def test_a_plugin_import_of_the_host_tool_breaks_the_contract(
    tree: tuple[Path, list[Path]],
) -> None:
    root, paths = tree
    probe = root / "plugin" / "sglx_platform" / "contract_probe.py"
    probe.write_text('"""A temporary import outside the core."""\n\nimport sglx.bundle.create\n')
    done = lint_imports(root, paths)
    assert done.returncode != 0, done.stdout
    assert (
        "the plugin, runtime and kernels import the core, never the host tool BROKEN" in done.stdout
    )
    assert "sglx_platform.contract_probe -> sglx.bundle.create" in done.stdout


def test_a_core_import_of_the_plugin_breaks_the_contract(tree: tuple[Path, list[Path]]) -> None:
    root, paths = tree
    (root / "scripts" / "sglx_core" / "contract_probe.py").write_text("import sglx_platform\n")
    done = lint_imports(root, paths)
    assert done.returncode != 0, done.stdout
    assert (
        "the core imports neither the host tool, the plugin nor the runtime BROKEN" in done.stdout
    )


def test_a_platform_import_of_the_runtime_breaks_the_contract(
    tree: tuple[Path, list[Path]],
) -> None:
    """What SGLang loads into its processes never reaches into the image's programs."""
    root, paths = tree
    probe = root / "plugin" / "sglx_platform" / "contract_probe.py"
    probe.write_text('"""A temporary import of the runtime."""\n\nimport sglx_runtime.serve\n')
    done = lint_imports(root, paths)
    assert done.returncode != 0, done.stdout
    broken = [line for line in done.stdout.splitlines() if line.endswith(" BROKEN")]
    assert broken == ["the platform plugin imports nothing of the image runtime BROKEN"], broken
    assert "sglx_platform.contract_probe -> sglx_runtime.serve" in done.stdout


def test_a_scan_import_of_the_bundle_breaks_the_scan_and_the_layers(
    tree: tuple[Path, list[Path]],
) -> None:
    """The one arrow that ran back up (scan -> the bundle layout) is pinned twice: by name, and
    by the host tool's layers (bundle sits above scan)."""
    root, paths = tree
    probe = root / "scripts" / "sglx" / "scan" / "contract_probe.py"
    probe.write_text("import sglx.bundle.layout\n")
    done = lint_imports(root, paths)
    assert done.returncode != 0, done.stdout
    broken = [line for line in done.stdout.splitlines() if line.endswith(" BROKEN")]
    assert broken == [
        "the scan knows no bundle layout: sglx.scan imports nothing of sglx.bundle BROKEN",
        "the host tool's layers: cli, command groups, image, build steps, shared modules BROKEN",
    ]
    assert "sglx.scan.contract_probe -> sglx.bundle.layout" in done.stdout


def test_the_host_checks_stand_on_the_control_node_and_nothing_stands_on_them(
    tree: tuple[Path, list[Path]],
) -> None:
    """The host checks run where only the control-node lock is installed (no torch, no SGLang):
    an import of the image's runtime breaks one contract, a host tool import of a check the
    other, each naming the import."""
    root, paths = tree
    (root / "hostchecks" / "contract_probe.py").write_text("import sglx_runtime.serve\n")
    (root / "scripts" / "sglx" / "contract_probe.py").write_text("import hostchecks.facts\n")
    done = lint_imports(root, paths)
    assert done.returncode != 0, done.stdout
    broken = [line for line in done.stdout.splitlines() if line.endswith(" BROKEN")]
    assert broken == [
        "the host checks import the host tool and the core, nothing of the image BROKEN",
        "nothing imports the host checks BROKEN",
    ], broken
    assert "hostchecks.contract_probe -> sglx_runtime.serve" in done.stdout
    assert "sglx.contract_probe -> hostchecks.facts" in done.stdout
