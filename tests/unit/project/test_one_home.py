"""Facts with one home (issue 38): the home defines the fact, every other module imports it.
A second definition anywhere in the product's Python fails here, naming the file and the home."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PRODUCT = [ROOT / "scripts", ROOT / "plugin", ROOT / "runtime", ROOT / "kernels", ROOT / "ansible"]

# fact -> (its home, a pattern only the home may hold)
FACTS = {
    "the size grammar": (
        "scripts/sglx_core/sizes.py",
        re.compile(r"""["'](KIB|KiB|GIB|GiB)["']\s*:"""),
    ),
    "sizes for people": ("scripts/sglx_core/sizes.py", re.compile(r"^def human(_bytes)?\(", re.M)),
    "the sha256 of a file": ("scripts/sglx_core/hashing.py", re.compile(r"hashlib\.file_digest\(")),
    "the worker count": (
        "scripts/sglx_core/processes.py",
        re.compile(r"^def default_jobs\(", re.M),
    ),
    "the file stamp": (
        "scripts/sglx_core/hashing.py",
        re.compile(r"st_dev, \w+\.st_ino, \w+\.st_size"),
    ),
    # argparse's float takes nan, inf and negatives: every number flag has a type that refuses
    # them (sglx_core.arg_types); the home itself parses with float(), never type=float.
    "a number on the command line": (
        "scripts/sglx_core/arg_types.py",
        re.compile(r"type=float\b|must be \{what\}"),
    ),
    # Ansible's modules run where sglx is not installed: ansible/ is left out of this one.
    "the sha256 digest pattern": ("scripts/sglx_core/digests.py", re.compile(r"0-9a-f\]\{64\}")),
}
# Facts whose home the Ansible content cannot import.
NOT_IN_ANSIBLE = {"the sha256 digest pattern"}


def _sources(fact: str) -> list[Path]:
    tops = [t for t in PRODUCT if not (fact in NOT_IN_ANSIBLE and t.name == "ansible")]
    return sorted(
        path
        for top in tops
        for path in top.rglob("*.py")
        if ".egg-info" not in str(path) and "__pycache__" not in path.parts
    )


@pytest.mark.parametrize("fact", FACTS)
def test_a_fact_has_one_home(fact: str) -> None:
    home, pattern = FACTS[fact]
    holders = [
        str(path.relative_to(ROOT)) for path in _sources(fact) if pattern.search(path.read_text())
    ]
    assert holders == [home], f"{fact}: defined in {holders}; its home is {home}: import it"


MAX_MODULE_LINES = 600
MODULE_ROOTS = [*PRODUCT, ROOT / "hostchecks"]


def test_no_product_module_is_over_600_lines() -> None:
    """A module past 600 lines holds more than one job (issue 38): split it along its seams."""
    long = {
        str(path.relative_to(ROOT)): lines
        for top in MODULE_ROOTS
        for path in top.rglob("*.py")
        if ".egg-info" not in str(path) and "__pycache__" not in path.parts
        if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"
