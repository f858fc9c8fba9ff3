"""The golden file's numbers, computed at `sglx image build` from the source checkpoint.

transformers loads the checkpoint on CPU in float32 (the reference precision, whatever dtype the
image serves), and for each prompt:

1. greedy-decodes `new_tokens` tokens with its KV cache, never stopping at EOS: a fixed length
   keeps every prompt's positions comparable, and the replay is teacher-forced, so tokens after
   an EOS are scored like any other;
2. runs one teacher-forced forward over prompt plus continuation and takes the log_softmax of
   the float32 logits: the continuation token at position t is scored by the row at t - 1. That
   is how sglang computes input-token log-probabilities (a prefill with `logprob_start_len`,
   log_softmax of float32 logits, no temperature), so both sides compute the same quantity;
3. records the argmax of each of those rows (`top1`): the continuation itself, by greedy,
   unless two tokens tie within float32 rounding between the cached and the full forward.

Token ids are stored, so the replay needs no tokenizer and cannot tokenise differently.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sglx_core.digests import sha256_hex
from sglx_core.errors import SglxError
from sglx_core.gate.golden import (
    BUILTIN_PROMPTS,
    DEFAULT_NEW_TOKENS,
    MAX_NEW_TOKENS,
    MAX_PROMPT_TOKENS,
    Generator,
    GoldenPrompt,
    Prompt,
    TokenizerInfo,
    check_prompts,
    golden_document,
    parse_golden,
    read_prompts,
    write_golden,
)


def build_golden(
    model_dir: Path,
    prompts: Sequence[Prompt] = BUILTIN_PROMPTS,
    new_tokens: int = DEFAULT_NEW_TOKENS,
    weights_digest: str | None = None,
    *,
    model_name: str | None = None,
) -> dict[str, Any]:
    """The golden document of the checkpoint in `model_dir` (see the module docstring).

    `weights_digest` is the source checkpoint's digest when the caller has one; `model_name`
    defaults to the folder's name."""
    check_prompts(prompts)
    if not 1 <= new_tokens <= MAX_NEW_TOKENS:
        raise SglxError(
            f"{new_tokens} new tokens per prompt; the golden file holds 1 to {MAX_NEW_TOKENS}",
            hint=f"use the default, {DEFAULT_NEW_TOKENS}",
            code="usage",
        )
    if weights_digest is not None:
        try:
            sha256_hex(weights_digest, "a weights digest")
        except ValueError as exc:
            raise SglxError(
                str(exc), hint="pass the digest sglx weights reports", code="usage"
            ) from None
    try:
        import torch
        import transformers
    except ImportError as exc:
        raise SglxError(
            f"building the golden file needs torch and transformers: {exc}",
            hint="run it from the sglx dev venv (make setup), which has both",
            code="environment",
        ) from None
    tokenizer, model = _load(model_dir, torch)
    vocab_size = int(model.get_output_embeddings().weight.shape[0])
    limit = getattr(model.config, "max_position_embeddings", None)
    golden_prompts = []
    with torch.no_grad():
        for index, prompt in enumerate(prompts):
            prompt_ids = [int(i) for i in tokenizer(prompt.text)["input_ids"]]
            _check_length(prompt, index, prompt_ids, new_tokens, limit, vocab_size)
            continuation = _greedy(model, torch, prompt_ids, new_tokens)
            logprobs, top1 = _scores(model, torch, prompt_ids, continuation)
            golden_prompts.append(
                GoldenPrompt(
                    id=prompt.id,
                    text=prompt.text,
                    prompt_ids=tuple(prompt_ids),
                    continuation_ids=tuple(continuation),
                    logprobs=tuple(logprobs),
                    top1=tuple(top1),
                )
            )
    document = golden_document(
        model=model_name or model_dir.resolve().name,
        weights_digest=weights_digest,
        vocab_size=vocab_size,
        tokenizer=TokenizerInfo(
            class_name=type(tokenizer).__name__,
            vocab_size=len(tokenizer),
            bos_token_id=_token_id(tokenizer.bos_token_id),
            eos_token_id=_token_id(tokenizer.eos_token_id),
        ),
        generator=Generator(transformers=transformers.__version__, torch=torch.__version__),
        new_tokens=new_tokens,
        prompts=golden_prompts,
    )
    parse_golden(document, where=f"golden file of {model_dir}")
    return document


def build_golden_file(
    model_dir: Path,
    out: Path,
    prompts: Sequence[Prompt] = BUILTIN_PROMPTS,
    new_tokens: int = DEFAULT_NEW_TOKENS,
    weights_digest: str | None = None,
) -> str:
    """`build_golden`, written to `out` atomically; returns the digest for the image label."""
    return write_golden(out, build_golden(model_dir, prompts, new_tokens, weights_digest))


def _load(model_dir: Path, torch: Any) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    hint = "is config.json present and the architecture known to this transformers?"
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
        loaded: Any = AutoModelForCausalLM.from_pretrained(
            str(model_dir),
            dtype=torch.float32,
            local_files_only=True,
            output_loading_info=True,
        )
    except (OSError, ValueError, RuntimeError) as exc:
        raise SglxError(
            f"{model_dir}: transformers cannot load the model or its tokenizer: {exc}",
            hint=hint,
            code="load_failed",
        ) from None
    model, info = loaded
    for kind in ("missing_keys", "mismatched_keys"):
        if keys := info.get(kind):
            shown = ", ".join(sorted(map(str, keys))[:5])
            raise SglxError(
                f"{model_dir}: transformers reports {kind.replace('_', ' ')} ({shown}): the "
                "reference would come from randomly initialised weights",
                hint="check that the checkpoint is complete and matches its config.json",
                code="load_failed",
            )
    return tokenizer, model.eval()


def _check_length(
    prompt: Prompt,
    index: int,
    prompt_ids: list[int],
    new_tokens: int,
    limit: int | None,
    vocab_size: int,
) -> None:
    where = f"golden prompts[{index}] ('{prompt.id}')"
    if not 1 <= len(prompt_ids) <= MAX_PROMPT_TOKENS:
        raise SglxError(
            f"{where} tokenises to {len(prompt_ids)} tokens; 1 to {MAX_PROMPT_TOKENS} are accepted",
            hint="use a shorter, non-empty prompt",
            code="usage",
        )
    if limit is not None and len(prompt_ids) + new_tokens > limit:
        raise SglxError(
            f"{where}: {len(prompt_ids)} prompt tokens plus {new_tokens} new ones pass the "
            f"model's max_position_embeddings ({limit})",
            hint="use a shorter prompt",
            code="usage",
        )
    if max(prompt_ids) >= vocab_size:
        raise SglxError(
            f"{where}: the tokenizer gives token id {max(prompt_ids)}, outside the model's "
            f"{vocab_size} logits",
            hint="the tokenizer does not belong to this checkpoint",
            code="usage",
        )


def _greedy(model: Any, torch: Any, prompt_ids: list[int], new_tokens: int) -> list[int]:
    """`new_tokens` argmax tokens after `prompt_ids`, decoded with the KV cache."""
    out = model(input_ids=torch.tensor([prompt_ids]), use_cache=True)
    continuation = [int(out.logits[0, -1].float().argmax())]
    while len(continuation) < new_tokens:
        out = model(
            input_ids=torch.tensor([[continuation[-1]]]),
            past_key_values=out.past_key_values,
            use_cache=True,
        )
        continuation.append(int(out.logits[0, -1].float().argmax()))
    return continuation


def _scores(
    model: Any, torch: Any, prompt_ids: list[int], continuation: list[int]
) -> tuple[list[float], list[int]]:
    """Log-probability and argmax at each continuation position, from one teacher-forced
    forward: row t - 1 of log_softmax(float32 logits) scores the token at position t."""
    logits = model(input_ids=torch.tensor([prompt_ids + continuation])).logits[0].float()
    start = len(prompt_ids) - 1
    rows = torch.log_softmax(logits[start : start + len(continuation)], dim=-1)
    chosen = rows.gather(1, torch.tensor(continuation)[:, None])[:, 0]
    return [float(v) for v in chosen.tolist()], [int(i) for i in rows.argmax(dim=-1).tolist()]


def _token_id(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def main(argv: list[str] | None = None) -> int:
    """`python -m sglx.gate.golden_build MODEL OUT [--prompts FILE] [--new-tokens N]
    [--weights-digest sha256:...]`: build a golden file by hand (the image build calls
    `build_golden_file`)."""
    parser = argparse.ArgumentParser(
        prog="python -m sglx.gate.golden_build", description=__doc__.splitlines()[0]
    )
    parser.add_argument("model", type=Path, help="the source checkpoint's folder")
    parser.add_argument("out", type=Path, help="the golden file to write")
    parser.add_argument("--prompts", type=Path, help="a JSON list of your own {id, text}")
    parser.add_argument("--new-tokens", type=int, default=DEFAULT_NEW_TOKENS)
    parser.add_argument("--weights-digest", help="the source checkpoint's digest (sha256:...)")
    args = parser.parse_args(argv)
    try:
        prompts = BUILTIN_PROMPTS + (read_prompts(args.prompts) if args.prompts else ())
        digest = build_golden_file(
            args.model, args.out, prompts, args.new_tokens, args.weights_digest
        )
    except SglxError as error:
        print(f"sglx golden: error: {error}", file=sys.stderr)
        return 2
    print(f"sglx golden: {len(prompts)} prompts written to {args.out} ({digest})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
