"""docs/reference/weights.md must list what the code does: methods, patterns, tolerances, codes."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglx.weights.check import LOGIT_TOLERANCE
from sglx.weights.policy import KNOWN_QUANT_METHODS, QUANT_PARAMETER_PATTERNS

ERROR_CODES = (
    "dst_exists",
    "missing_shard",
    "missing_tensor",
    "index_mismatch",
    "missing_index",
    "truncated",
    "corrupt",
    "unknown_dtype",
    "non_finite",
    "overflow",
    "unsupported_quantization",
    "no_manifest",
)


@pytest.fixture(scope="module")
def doc(repo: Path) -> str:
    return (repo / "docs" / "reference" / "weights.md").read_text()


def test_every_known_quantization_method_and_parameter_pattern_is_documented(doc: str) -> None:
    assert [m for m in sorted(KNOWN_QUANT_METHODS) if f"`{m}`" not in doc] == []
    assert [p for p in QUANT_PARAMETER_PATTERNS if f"`{p}`" not in doc] == []


def test_logit_tolerances_are_the_documented_ones(doc: str) -> None:
    def shown(value: float) -> str:
        return f"{value:g}".replace("e-0", "e-")  # 1e-05 -> 1e-5, as the doc writes it

    assert f"exact (nothing lost) {shown(LOGIT_TOLERANCE['exact'])}" in doc
    assert f"float32 {shown(LOGIT_TOLERANCE['F32'])}" in doc
    assert f"float16 {shown(LOGIT_TOLERANCE['F16'])}" in doc
    assert f"bfloat16 {shown(LOGIT_TOLERANCE['BF16'])}" in doc


def test_every_error_code_is_documented(doc: str) -> None:
    assert [c for c in ERROR_CODES if f"`{c}`" not in doc] == []
