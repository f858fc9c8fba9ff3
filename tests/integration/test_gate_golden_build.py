"""`build_golden` on a demo model made here with transformers: deterministic, schema-valid, and
the reference tokens are the argmax at each position with their log-probability the largest."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from sglx.gate.golden_build import build_golden, build_golden_file
from sglx_core.errors import SglxError
from sglx_core.gate.golden import (
    BUILTIN_PROMPTS,
    DEFAULT_NEW_TOKENS,
    Prompt,
    canonical_bytes,
    file_digest,
    load_golden,
    parse_golden,
)

DIGEST = "sha256:" + "c" * 64


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from sglx.demo_model import make_demo_model

    return make_demo_model(tmp_path_factory.mktemp("golden") / "demo")


@pytest.fixture(scope="module")
def document(demo: Path) -> dict[str, Any]:
    return build_golden(demo, BUILTIN_PROMPTS, DEFAULT_NEW_TOKENS, weights_digest=DIGEST)


def test_the_golden_document_is_schema_valid_and_records_its_generator(
    document: dict[str, Any],
) -> None:
    import torch
    import transformers

    golden = parse_golden(document)
    assert golden.model == "demo"
    assert golden.weights_digest == DIGEST
    assert golden.vocab_size == 384
    assert golden.generator.transformers == transformers.__version__
    assert golden.generator.torch == torch.__version__
    assert (golden.generator.dtype, golden.generator.device) == ("float32", "cpu")
    assert [p.id for p in golden.prompts] == [p.id for p in BUILTIN_PROMPTS]
    assert all(len(p.continuation_ids) == DEFAULT_NEW_TOKENS for p in golden.prompts)


def test_building_twice_gives_the_same_bytes(demo: Path, document: dict[str, Any]) -> None:
    again = build_golden(demo, BUILTIN_PROMPTS, DEFAULT_NEW_TOKENS, weights_digest=DIGEST)
    assert canonical_bytes(again) == canonical_bytes(document)


def test_the_reference_tokens_are_the_greedy_argmax_with_the_largest_logprob(
    demo: Path, document: dict[str, Any]
) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(demo, dtype=torch.float32).eval()
    for prompt in parse_golden(document).prompts:
        assert prompt.top1 == prompt.continuation_ids
        ids = torch.tensor([list(prompt.prompt_ids + prompt.continuation_ids)])
        with torch.no_grad():
            logprobs = torch.log_softmax(model(input_ids=ids).logits[0].float(), dim=-1)
        start = len(prompt.prompt_ids) - 1
        for k, (token, value) in enumerate(
            zip(prompt.continuation_ids, prompt.logprobs, strict=True)
        ):
            row = logprobs[start + k]
            assert int(row.argmax()) == token
            assert value == pytest.approx(float(row.max()), abs=1e-6)
            assert value <= 0 and math.isfinite(value)


def test_the_file_is_written_atomically_and_its_digest_is_the_label_value(
    demo: Path, tmp_path: Path
) -> None:
    out = tmp_path / "image" / "golden.json"
    prompts = (Prompt("mine", "Hello, world!"),)
    digest = build_golden_file(demo, out, prompts, new_tokens=4)
    assert digest == file_digest(out)
    golden = load_golden(out, expected_digest=digest)
    assert [p.id for p in golden.prompts] == ["mine"]
    assert golden.weights_digest is None
    assert [p.name for p in out.parent.iterdir()] == ["golden.json"]


def test_prompts_that_pass_the_models_context_are_refused(demo: Path) -> None:
    long = Prompt("long", "The quick brown fox " * 200)
    with pytest.raises(SglxError, match=r"pass the model's max_position_embeddings \(512\)"):
        build_golden(demo, (long,), 16)
