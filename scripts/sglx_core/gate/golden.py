"""Golden numerics: reference log-probabilities made at image build, replayed at acceptance.

At `sglx image build`, transformers runs the source checkpoint on CPU in float32 over a fixed
set of prompts (`BUILTIN_PROMPTS`, plus the user's own): the greedy continuation of each, and the
log-probability of every continuation token taken from one teacher-forced forward over prompt
plus continuation (`sglx.gate.golden_build`). The file travels in the image and in the bundle,
and its digest in an image label. At acceptance the served endpoint scores the same token ids,
teacher-forced (sglang's /generate with `return_logprob` and `logprob_start_len`,
`sglx_runtime.golden_replay`), and `compare` holds the served numbers against the reference
within a `Tolerance` chosen by the served weights dtype (sglx_core.gate.golden_compare).

Token ids, not text, are stored and replayed: the server's tokenizer then cannot make the two
sides score different sequences.

The golden file crosses the air gap inside the bundle, so it is untrusted input: read bounded
(`MAX_GOLDEN_BYTES`) as a regular file, parsed under sglx_core.untrusted's rules, and checked
field by field, each error naming the field ("golden.json: prompts[2].logprobs has 15 values for
16 continuation tokens"). A missing or malformed golden file raises SglxError: the gate fails,
it never skips.

Stdlib only: the plugin imports this inside the image, and the host checks on the hosts.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglx_core.digests import DIGEST
from sglx_core.errors import SglxError
from sglx_core.gate.fields import TOP_LEVEL, FieldCheck, shown
from sglx_core.hashing import sha256_file
from sglx_core.output_files import atomic_write_bytes
from sglx_core.untrusted import parse_json, read_bounded

FORMAT_VERSION = 1
GOLDEN_FILE = "golden.json"
GOLDEN_LABEL = "io.sglx.golden.digest"
"""The image label holding the golden file's digest (`file_digest`)."""
DEFAULT_NEW_TOKENS = 16
"""Continuation tokens per prompt: enough positions to see drift, few enough to build a 70B
reference on CPU in minutes."""

MAX_GOLDEN_BYTES = 8 * 1024 * 1024
"""Largest golden file read (the built-in set is about 10 KiB; 64 prompts of 4096 tokens, the
limits below, fit)."""
MAX_PROMPTS = 64
MAX_PROMPT_TOKENS = 4096
MAX_NEW_TOKENS = 256
MAX_TEXT_CHARS = 8192
MAX_NAME_CHARS = 256
MAX_VOCAB = 1 << 24
"""Largest vocabulary accepted (real ones are at most about 260k tokens)."""
MAX_PROMPTS_BYTES = 1024 * 1024
"""Largest user prompt file read."""

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_DIGEST = re.compile(DIGEST)
_FIX = "rebuild the image (sglx image build writes the golden file) and copy its bundle again"


@dataclass(frozen=True)
class Prompt:
    """One prompt of the golden set: a stable id (named in findings) and its text."""

    id: str
    text: str


BUILTIN_PROMPTS: tuple[Prompt, ...] = (
    Prompt("english", "The quick brown fox jumps over the lazy dog. An operator copies"),
    Prompt("digits", "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17"),
    Prompt("code", "def fibonacci(n):\n    if n < 2:\n        return n\n    return"),
    Prompt("non-ascii", "Grüße aus Köln: naïve café, 東京タワー, Привет мир —"),
    Prompt("question", "Question: What is the capital of France?\nAnswer:"),
    Prompt("list", "Steps to install:\n1. Copy the bundle.\n2. Verify its checksums.\n3."),
)
"""The prompts every image's golden file holds: English prose, digits, code, non-ASCII text, a
question and a numbered list, so tokenisation, position and vocabulary ranges all vary."""


@dataclass(frozen=True)
class TokenizerInfo:
    """What tokenised the prompts (the ids are stored; this is for people reading the file)."""

    class_name: str
    vocab_size: int
    bos_token_id: int | None
    eos_token_id: int | None


@dataclass(frozen=True)
class Generator:
    """What computed the reference numbers."""

    transformers: str
    torch: str
    dtype: str = "float32"
    device: str = "cpu"


@dataclass(frozen=True)
class GoldenPrompt:
    """One prompt's reference: its ids, the greedy continuation, and for each continuation token
    its log-probability and the argmax token at that position (the token itself, by greedy)."""

    id: str
    text: str
    prompt_ids: tuple[int, ...]
    continuation_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    top1: tuple[int, ...]


@dataclass(frozen=True)
class Golden:
    """A parsed, checked golden file."""

    model: str
    weights_digest: str | None
    vocab_size: int
    tokenizer: TokenizerInfo
    generator: Generator
    new_tokens: int
    prompts: tuple[GoldenPrompt, ...]


# --- the file: canonical bytes, digest, reading --------------------------------------------


def canonical_bytes(document: Mapping[str, Any]) -> bytes:
    """The golden file's bytes: keys sorted, no whitespace, UTF-8, one final newline. Floats are
    written in Python's shortest round-trip form, so the same numbers give the same bytes."""
    text = json.dumps(
        document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return text.encode("utf-8") + b"\n"


def golden_digest(document: Mapping[str, Any]) -> str:
    """``sha256:`` and the hex sha256 of `canonical_bytes(document)`: the image label's value,
    equal to `file_digest` of the file `write_golden` wrote."""
    return "sha256:" + hashlib.sha256(canonical_bytes(document)).hexdigest()


def file_digest(path: Path) -> str:
    """``sha256:`` and the hex sha256 of the golden file's bytes (sglx_core.hashing.sha256_file)."""
    return "sha256:" + sha256_file(path)


def write_golden(path: Path, document: Mapping[str, Any]) -> str:
    """Check `document`, write its canonical bytes to `path` atomically and return its digest."""
    parse_golden(document, where=str(path))
    atomic_write_bytes(path, canonical_bytes(document), label="golden file")
    return golden_digest(document)


def load_golden(path: Path, *, expected_digest: str | None = None) -> Golden:
    """Read, bound and check the golden file at `path`.

    With `expected_digest` (the image label's value) the bytes must hash to it. Every problem,
    a missing file included, raises SglxError naming the file and the field."""
    raw = read_bounded(path, what="golden file", max_bytes=MAX_GOLDEN_BYTES, hint=_FIX)
    if expected_digest is not None:
        found = "sha256:" + hashlib.sha256(raw).hexdigest()
        if found != expected_digest:
            raise SglxError(
                f"{path}: the golden file's digest is {found}, the image label says "
                f"{expected_digest}",
                hint=_FIX,
                code="digest_mismatch",
                path=str(path),
            )
    document = parse_json(raw, path=path, what="golden file", hint=_FIX)
    return parse_golden(document, where=str(path))


def parse_golden(document: Any, *, where: str = GOLDEN_FILE) -> Golden:
    """Check a parsed golden document against format version 1; `where` names it in errors."""
    check = _Check(where)
    top = check.object(document, TOP_LEVEL, _TOP_KEYS)
    version = top.get("format_version")
    if version != FORMAT_VERSION or isinstance(version, bool):
        raise check.error(
            f"format_version is {version!r}; this sglx reads version {FORMAT_VERSION}",
            hint="build the image with the sglx that checks it, or check with the sglx that "
            "built it",
        )
    vocab_size = check.integer(top.get("vocab_size"), "vocab_size", 1, MAX_VOCAB)
    digest = top.get("weights_digest")
    if digest is not None and not (isinstance(digest, str) and _DIGEST.fullmatch(digest)):
        raise check.error("weights_digest is not null or 'sha256:' and 64 lowercase hex digits")
    new_tokens = check.integer(top.get("new_tokens"), "new_tokens", 1, MAX_NEW_TOKENS)
    prompts_raw = top.get("prompts")
    if not isinstance(prompts_raw, list) or not 1 <= len(prompts_raw) <= MAX_PROMPTS:
        raise check.error(f"prompts is not a list of 1 to {MAX_PROMPTS} prompts")
    prompts = tuple(
        _parse_prompt(check, item, f"prompts[{i}]", vocab_size, new_tokens)
        for i, item in enumerate(prompts_raw)
    )
    seen: set[str] = set()
    for i, prompt in enumerate(prompts):
        if prompt.id in seen:
            raise check.error(f"prompts[{i}].id {prompt.id!r} repeats an earlier prompt's id")
        seen.add(prompt.id)
    return Golden(
        model=check.string(top.get("model"), "model", MAX_NAME_CHARS),
        weights_digest=digest,
        vocab_size=vocab_size,
        tokenizer=_parse_tokenizer(check, top.get("tokenizer"), vocab_size),
        generator=_parse_generator(check, top.get("generator")),
        new_tokens=new_tokens,
        prompts=prompts,
    )


def golden_document(
    *,
    model: str,
    weights_digest: str | None,
    vocab_size: int,
    tokenizer: TokenizerInfo,
    generator: Generator,
    new_tokens: int,
    prompts: Sequence[GoldenPrompt],
) -> dict[str, Any]:
    """The JSON document of a golden file (what `write_golden` writes)."""
    return {
        "format_version": FORMAT_VERSION,
        "model": model,
        "weights_digest": weights_digest,
        "vocab_size": vocab_size,
        "tokenizer": {
            "class": tokenizer.class_name,
            "vocab_size": tokenizer.vocab_size,
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id,
        },
        "generator": {
            "transformers": generator.transformers,
            "torch": generator.torch,
            "dtype": generator.dtype,
            "device": generator.device,
        },
        "new_tokens": new_tokens,
        "prompts": [
            {
                "id": p.id,
                "text": p.text,
                "prompt_ids": list(p.prompt_ids),
                "continuation_ids": list(p.continuation_ids),
                "logprobs": list(p.logprobs),
                "top1": list(p.top1),
            }
            for p in prompts
        ],
    }


_TOP_KEYS = frozenset(
    {
        "format_version",
        "model",
        "weights_digest",
        "vocab_size",
        "tokenizer",
        "generator",
        "new_tokens",
        "prompts",
    }
)
_TOKENIZER_KEYS = frozenset({"class", "vocab_size", "bos_token_id", "eos_token_id"})
_GENERATOR_KEYS = frozenset({"transformers", "torch", "dtype", "device"})
_PROMPT_KEYS = frozenset({"id", "text", "prompt_ids", "continuation_ids", "logprobs", "top1"})


class _Check(FieldCheck):
    """Field checks whose errors name the file and the field."""

    def __init__(self, where: str) -> None:
        super().__init__(where, _FIX)

    def optional_integer(self, value: Any, field: str, high: int) -> int | None:
        return None if value is None else self.integer(value, field, 0, high)

    def ids(self, value: Any, field: str, vocab_size: int, low: int, high: int) -> tuple[int, ...]:
        if not isinstance(value, list) or not low <= len(value) <= high:
            raise self.error(f"{field} is not a list of {low} to {high} token ids")
        for i, item in enumerate(value):
            if isinstance(item, bool) or not isinstance(item, int) or not 0 <= item < vocab_size:
                raise self.error(
                    f"{field}[{i}] is {shown(item)}, not a token id from 0 to {vocab_size - 1} "
                    "(vocab_size)"
                )
        return tuple(value)


def _parse_tokenizer(check: _Check, value: Any, vocab_size: int) -> TokenizerInfo:
    tok = check.object(value, "tokenizer", _TOKENIZER_KEYS)
    return TokenizerInfo(
        class_name=check.string(tok.get("class"), "tokenizer.class", MAX_NAME_CHARS),
        vocab_size=check.integer(tok.get("vocab_size"), "tokenizer.vocab_size", 1, MAX_VOCAB),
        bos_token_id=check.optional_integer(
            tok.get("bos_token_id"), "tokenizer.bos_token_id", MAX_VOCAB
        ),
        eos_token_id=check.optional_integer(
            tok.get("eos_token_id"), "tokenizer.eos_token_id", MAX_VOCAB
        ),
    )


def _parse_generator(check: _Check, value: Any) -> Generator:
    gen = check.object(value, "generator", _GENERATOR_KEYS)
    generator = Generator(
        transformers=check.string(gen.get("transformers"), "generator.transformers", 64),
        torch=check.string(gen.get("torch"), "generator.torch", 64),
        dtype=check.string(gen.get("dtype"), "generator.dtype", 16),
        device=check.string(gen.get("device"), "generator.device", 16),
    )
    if generator.dtype != "float32":
        raise check.error(
            f"generator.dtype is {generator.dtype!r}; the reference is computed in float32"
        )
    return generator


def _parse_prompt(
    check: _Check, value: Any, field: str, vocab_size: int, new_tokens: int
) -> GoldenPrompt:
    item = check.object(value, field, _PROMPT_KEYS)
    prompt_id = item.get("id")
    if not isinstance(prompt_id, str) or not _ID.fullmatch(prompt_id):
        raise check.error(
            f"{field}.id is {shown(prompt_id)}, not 1 to 64 letters, digits, '.', '_' or '-'"
        )
    text = item.get("text")
    if not isinstance(text, str) or len(text) > MAX_TEXT_CHARS:
        raise check.error(f"{field}.text is not a string of at most {MAX_TEXT_CHARS} characters")
    prompt_ids = check.ids(
        item.get("prompt_ids"), f"{field}.prompt_ids", vocab_size, 1, MAX_PROMPT_TOKENS
    )
    continuation = check.ids(
        item.get("continuation_ids"), f"{field}.continuation_ids", vocab_size, 1, MAX_NEW_TOKENS
    )
    if len(continuation) != new_tokens:
        raise check.error(
            f"{field}.continuation_ids has {len(continuation)} tokens; new_tokens is {new_tokens}"
        )
    logprobs = item.get("logprobs")
    if not isinstance(logprobs, list):
        raise check.error(f"{field}.logprobs is not a list of numbers")
    if len(logprobs) != len(continuation):
        raise check.error(
            f"{field}.logprobs has {len(logprobs)} values for {len(continuation)} continuation "
            "tokens"
        )
    for i, lp in enumerate(logprobs):
        if isinstance(lp, bool) or not isinstance(lp, int | float) or not -1e6 <= lp <= 0:
            raise check.error(
                f"{field}.logprobs[{i}] is {shown(lp)}, not a log-probability (a finite number "
                "at most 0)"
            )
    top1 = item.get("top1")
    if isinstance(top1, list) and len(top1) != len(continuation):
        raise check.error(
            f"{field}.top1 has {len(top1)} ids for {len(continuation)} continuation tokens"
        )
    return GoldenPrompt(
        id=prompt_id,
        text=text,
        prompt_ids=prompt_ids,
        continuation_ids=continuation,
        logprobs=tuple(float(lp) for lp in logprobs),
        top1=check.ids(top1, f"{field}.top1", vocab_size, 1, MAX_NEW_TOKENS),
    )


# --- the user's prompts --------------------------------------------------------------------


def check_prompts(prompts: Sequence[Prompt], *, where: str = "golden prompts") -> None:
    """Refuse a prompt set the golden file could not hold: ids that repeat or that a finding
    could not name, empty or oversized texts, too many prompts."""
    if not 1 <= len(prompts) <= MAX_PROMPTS:
        raise SglxError(
            f"{where}: {len(prompts)} prompts; a golden set holds 1 to {MAX_PROMPTS}",
            hint="drop some of your own prompts",
            code="usage",
        )
    seen: set[str] = set()
    for i, prompt in enumerate(prompts):
        if not _ID.fullmatch(prompt.id):
            raise SglxError(
                f"{where}: prompts[{i}].id {prompt.id!r} is not 1 to 64 letters, digits, '.', "
                "'_' or '-'",
                hint="give each prompt a short id; findings name it",
                code="usage",
            )
        if prompt.id in seen:
            raise SglxError(
                f"{where}: prompts[{i}].id {prompt.id!r} is used twice (the built-in ids are "
                f"{', '.join(p.id for p in BUILTIN_PROMPTS)})",
                hint="give your prompt another id",
                code="usage",
            )
        seen.add(prompt.id)
        if not 1 <= len(prompt.text) <= MAX_TEXT_CHARS:
            raise SglxError(
                f"{where}: prompts[{i}].text has {len(prompt.text)} characters; 1 to "
                f"{MAX_TEXT_CHARS} are accepted",
                hint="use a shorter prompt",
                code="usage",
            )


def read_prompts(path: Path) -> tuple[Prompt, ...]:
    """The user's own prompts: a JSON list of {"id": ..., "text": ...}, bounded and checked."""
    hint = 'write a JSON list such as [{"id": "mine", "text": "Once upon a time"}]'
    raw = read_bounded(path, what="prompt file", max_bytes=MAX_PROMPTS_BYTES, hint=hint)
    document = parse_json(raw, path=path, what="prompt file", hint=hint)
    if not isinstance(document, list):
        raise SglxError(f"{path}: the prompt file is not a JSON list", hint=hint, code="usage")
    prompts = []
    for i, item in enumerate(document):
        if (
            not isinstance(item, dict)
            or set(item) != {"id", "text"}
            or not isinstance(item["id"], str)
            or not isinstance(item["text"], str)
        ):
            raise SglxError(
                f"{path}: prompts[{i}] is not an object with the string keys 'id' and 'text' only",
                hint=hint,
                code="usage",
            )
        prompts.append(Prompt(item["id"], item["text"]))
    check_prompts(prompts, where=str(path))
    return tuple(prompts)
