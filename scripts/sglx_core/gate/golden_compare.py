"""Golden numerics, the comparison: the served log-probabilities of each golden prompt's
continuation held against the float32 reference (sglx_core.gate.golden) within a `Tolerance`
the profile sets per weights dtype, and the report that names every prompt, its worst
positions, and each drifting token.

Stdlib only: the plugin imports this inside the image (sglx_runtime.golden_replay).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sglx_core.gate.golden import Golden, GoldenPrompt

WORST_POSITIONS = 3
"""Positions listed per prompt in a report, largest difference first."""
NAMED_POSITIONS = 8
"""Drifting positions named in a finding before "and N more"."""


@dataclass(frozen=True)
class Tolerance:
    """How far served log-probabilities may stray from the float32 reference, per prompt.

    `max_abs` and `mean_abs` bound |served - reference| over the continuation tokens;
    `min_top1_agreement` is the least fraction of positions whose served argmax must equal the
    reference's. The profile sets one per weights dtype (docs/reference/gate.md derives them)."""

    max_abs: float
    mean_abs: float
    min_top1_agreement: float

    def __post_init__(self) -> None:
        for name in ("max_abs", "mean_abs"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"Tolerance.{name} is {value}; it must be a finite number >= 0")
        if not 0 <= self.min_top1_agreement <= 1:
            raise ValueError(
                f"Tolerance.min_top1_agreement is {self.min_top1_agreement}; it must be in [0, 1]"
            )

    def to_json(self) -> dict[str, float]:
        return {
            "max_abs": self.max_abs,
            "mean_abs": self.mean_abs,
            "min_top1_agreement": self.min_top1_agreement,
        }


@dataclass(frozen=True)
class Served:
    """What the server answered for one golden prompt, one entry per continuation token: the
    log-probability of the reference token (None where none came back) and the served argmax."""

    logprobs: tuple[float | None, ...]
    top1: tuple[int | None, ...]


@dataclass(frozen=True)
class Position:
    """One continuation token in a report."""

    index: int  # 0-based, in the continuation
    token_id: int
    reference: float
    served: float | None
    reference_top1: int
    served_top1: int | None

    @property
    def abs_diff(self) -> float | None:
        return None if self.served is None else abs(self.served - self.reference)

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "token_id": self.token_id,
            "reference_logprob": self.reference,
            "served_logprob": self.served,
            "abs_diff": self.abs_diff,
            "reference_top1": self.reference_top1,
            "served_top1": self.served_top1,
        }


@dataclass(frozen=True)
class PromptReport:
    """One prompt's comparison: the numbers, the worst positions and the verdict."""

    id: str
    tokens: int
    top1_agreeing: int  # positions whose served argmax is the reference's
    mean_abs: float | None  # None when no served value came back
    max_abs: float | None
    worst: tuple[Position, ...]
    drifting: tuple[int, ...]  # positions named in the finding
    passed: bool
    finding: str | None

    @property
    def top1_agreement(self) -> float:
        return self.top1_agreeing / self.tokens

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "tokens": self.tokens,
            "top1_agreement": self.top1_agreement,
            "mean_abs": self.mean_abs,
            "max_abs": self.max_abs,
            "worst": [p.to_json() for p in self.worst],
            "drifting": list(self.drifting),
            "passed": self.passed,
            "finding": self.finding,
        }


@dataclass(frozen=True)
class GoldenReport:
    """Every prompt's comparison and the overall verdict (pass only if every prompt passes)."""

    tolerance: Tolerance
    prompts: tuple[PromptReport, ...]
    top1_agreement: float
    mean_abs: float | None
    max_abs: float | None
    passed: bool

    def findings(self, host: str | None = None) -> tuple[str, ...]:
        """One line per failing prompt, naming the host (when given), the prompt and the
        continuation token positions."""
        prefix = f"host {host}: " if host else ""
        return tuple(prefix + p.finding for p in self.prompts if p.finding is not None)

    def summary(self) -> str:
        tokens = sum(p.tokens for p in self.prompts)
        verdict = "pass" if self.passed else "FAIL"
        tol = self.tolerance
        return (
            f"golden numerics: {len(self.prompts)} prompts, {tokens} tokens: top-1 agreement "
            f"{self.top1_agreement:.3f}, mean |Δ| {_num(self.mean_abs)}, max |Δ| "
            f"{_num(self.max_abs)}: {verdict} (tolerance: max {tol.max_abs:g}, mean "
            f"{tol.mean_abs:g}, top-1 >= {tol.min_top1_agreement:g})"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "tolerance": self.tolerance.to_json(),
            "top1_agreement": self.top1_agreement,
            "mean_abs": self.mean_abs,
            "max_abs": self.max_abs,
            "passed": self.passed,
            "prompts": [p.to_json() for p in self.prompts],
        }


def compare(golden: Golden, served: Mapping[str, Served], tolerance: Tolerance) -> GoldenReport:
    """Hold the served numbers (by prompt id) against the reference.

    A prompt passes when every continuation token has a served value, the largest and the mean
    absolute difference are within `tolerance`, and the served argmax agrees with the
    reference's at `min_top1_agreement` of the positions or more. A served value that is not a
    finite number counts as missing."""
    reports = [_compare_prompt(p, served.get(p.id), tolerance) for p in golden.prompts]
    diffs: list[float] = []
    for prompt in golden.prompts:
        answer = served.get(prompt.id)
        if answer is not None:
            diffs.extend(_diffs(prompt, answer))
    return GoldenReport(
        tolerance=tolerance,
        prompts=tuple(reports),
        top1_agreement=sum(r.top1_agreeing for r in reports) / sum(r.tokens for r in reports),
        mean_abs=sum(diffs) / len(diffs) if diffs else None,
        max_abs=max(diffs) if diffs else None,
        passed=all(r.passed for r in reports),
    )


def _served_value(answer: Served, i: int) -> float | None:
    value = answer.logprobs[i] if i < len(answer.logprobs) else None
    return value if value is not None and math.isfinite(value) else None


def _diffs(prompt: GoldenPrompt, answer: Served) -> list[float]:
    out = []
    for i, ref in enumerate(prompt.logprobs):
        value = _served_value(answer, i)
        if value is not None:
            out.append(abs(value - ref))
    return out


def _compare_prompt(
    prompt: GoldenPrompt, answer: Served | None, tolerance: Tolerance
) -> PromptReport:
    n = len(prompt.continuation_ids)
    answer = answer or Served((), ())
    positions = [
        Position(
            index=i,
            token_id=prompt.continuation_ids[i],
            reference=prompt.logprobs[i],
            served=_served_value(answer, i),
            reference_top1=prompt.top1[i],
            served_top1=answer.top1[i] if i < len(answer.top1) else None,
        )
        for i in range(n)
    ]
    present = [p for p in positions if p.abs_diff is not None]
    missing = [p.index for p in positions if p.abs_diff is None]
    diffs = [p.abs_diff for p in present if p.abs_diff is not None]
    mean_abs = sum(diffs) / len(diffs) if diffs else None
    max_abs = max(diffs) if diffs else None
    mismatched = [p.index for p in positions if p.served_top1 != p.reference_top1]
    agreement = (n - len(mismatched)) / n
    worst = sorted(present, key=lambda p: (-(p.abs_diff or 0.0), p.index))[:WORST_POSITIONS]
    over = [p.index for p in present if (p.abs_diff or 0.0) > tolerance.max_abs]

    reasons = []
    if len(answer.logprobs) > n:
        reasons.append(f"the server scored {len(answer.logprobs)} tokens for {n}")
    if missing:
        reasons.append(f"no served log-probability at {len(missing)} of {n} tokens")
    if max_abs is not None and max_abs > tolerance.max_abs:
        reasons.append(f"max |Δ logprob| {max_abs:.3g} > {tolerance.max_abs:g}")
    if mean_abs is not None and mean_abs > tolerance.mean_abs:
        reasons.append(f"mean |Δ logprob| {mean_abs:.3g} > {tolerance.mean_abs:g}")
    if agreement < tolerance.min_top1_agreement:
        reasons.append(
            f"top-1 agreement {agreement:.3f} ({n - len(mismatched)}/{n}) < "
            f"{tolerance.min_top1_agreement:g}"
        )
    if not reasons:
        return PromptReport(
            prompt.id, n, n - len(mismatched), mean_abs, max_abs, tuple(worst), (), True, None
        )
    named = sorted(set(missing) | set(over) | set(mismatched)) or sorted(p.index for p in worst)
    shown = ", ".join(str(i) for i in named[:NAMED_POSITIONS])
    if len(named) > NAMED_POSITIONS:
        shown += f" and {len(named) - NAMED_POSITIONS} more"
    finding = (
        f"prompt '{prompt.id}': served numbers drift from the reference at continuation "
        f"token{'s' if len(named) > 1 else ''} {shown}: {'; '.join(reasons)}"
    )
    return PromptReport(
        prompt.id,
        n,
        n - len(mismatched),
        mean_abs,
        max_abs,
        tuple(worst),
        tuple(named),
        False,
        finding,
    )


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"
