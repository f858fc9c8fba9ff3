"""Replay the image's golden file through the served endpoint, teacher-forced, and compare.

    python -m sglx_runtime.golden_replay --url http://127.0.0.1:PORT [--golden PATH]
        [--max-abs X --mean-abs Y --min-top1 Z] [--digest sha256:...] [--host NAME] [--json]

For each golden prompt, one POST /generate with `input_ids` = prompt ids + continuation ids,
`max_new_tokens` 1, temperature 0, `return_logprob`, `top_logprobs_num` 1 and
`logprob_start_len` = len(prompt ids) - 1. The served log-probability of each reference token
and the served argmax at its position are then held against the reference
(sglx_core.gate.golden_compare.compare) within the tolerances given, or else the baked profile's
`gate.numerics.tolerances` entry for the dtype the server serves in: its `--dtype` from
GET /server_info, or for `auto` sglang's rule over the loaded checkpoint's dtype. The golden
file defaults to the one the image build put beside the baked profile (/etc/sglx/golden.json).

What sglang 0.5.23 returns (scheduler_components/logprob_result_processor.py,
layers/logits_processor.py, tokenizer_manager.py): `meta_info.input_token_logprobs` has one
`[logprob, token_id, text]` entry per input token from `logprob_start_len` on; entry k scores
`input_ids[logprob_start_len + k]` given the tokens before it, from log_softmax of the float32
logits (no temperature). Entry 0 is always `[null, id, ...]`: its logits row, the one before
`logprob_start_len`, is not computed (`[None] + input_token_logprobs[:-1]`). Starting one token
before the continuation therefore makes entry 0 the last prompt token and entries 1..N the N
continuation tokens. `meta_info.input_top_logprobs` has the same alignment (entry 0 null, the
others a list of `top_logprobs_num` entries). `max_new_tokens` 0 is accepted too, but takes
sglang's prefill-only scoring path; 1 keeps the ordinary prefill the server runs for every
request.

Stdlib only (urllib): the runtime needs no HTTP library. Responses are read bounded.

Exit codes: 0 every prompt within tolerance, 1 drift (one finding per prompt, naming the host,
the prompt and the continuation token positions), 2 usage or environment: a missing or
malformed golden file, an unreachable server, an answer that is not sglang's. The gate treats 2
as a failure too, never as a skip.
"""

from __future__ import annotations

import argparse
import json
import math
import socket
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from sglx_core.arg_types import finite, positive
from sglx_core.errors import SglxError
from sglx_core.gate.golden import (
    GOLDEN_FILE,
    Golden,
    GoldenPrompt,
    load_golden,
)
from sglx_core.gate.golden_compare import GoldenReport, Served, Tolerance, compare
from sglx_core.profile import Profile
from sglx_core.report import Finding, Result, Table, render, result_of
from sglx_core.serving.model import read_model, served_dtype
from sglx_core.untrusted import parse_json
from sglx_platform.image_profile import DEFAULT_PROFILE, baked_profile

COMMAND = ("golden_replay",)
MAX_RESPONSE_BYTES = 4 * 1024 * 1024
"""Largest /generate answer read (one with 256 scored tokens and their top-1 is about 40 KiB)."""
DEFAULT_TIMEOUT_S = 120.0
DEFAULT_GOLDEN = DEFAULT_PROFILE.parent / GOLDEN_FILE
"""Where the image build puts the golden file, beside the baked profile."""


def request_body(prompt: GoldenPrompt) -> dict[str, Any]:
    """The /generate request that scores `prompt`'s continuation teacher-forced."""
    return {
        "input_ids": [*prompt.prompt_ids, *prompt.continuation_ids],
        "sampling_params": {"max_new_tokens": 1, "temperature": 0},
        "return_logprob": True,
        "logprob_start_len": len(prompt.prompt_ids) - 1,
        "top_logprobs_num": 1,
    }


def served_numbers(prompt: GoldenPrompt, body: Any, vocab_size: int | None = None) -> Served:
    """The served log-probabilities and argmax ids of `prompt`'s continuation tokens, read from
    sglang's /generate answer `body` (alignment in the module docstring).

    An answer that is not shaped as sglang's, or that scores other tokens than those sent,
    raises SglxError; a null or non-finite log-probability is kept as None (compare counts it
    as missing, so the prompt fails). sglang reports the id of the vocabulary's last token as
    0 (it clips padded image-token ids: `x if x < vocab_size - 1 else 0`), so with `vocab_size`
    that 0 is taken for the last id."""
    where = f"the server's answer for prompt '{prompt.id}'"
    meta = body.get("meta_info") if isinstance(body, dict) else None
    if not isinstance(meta, dict):
        raise _protocol(f"{where} has no meta_info object")
    n = len(prompt.continuation_ids)
    entries = _aligned(meta, "input_token_logprobs", n + 1, where)
    tops = _aligned(meta, "input_top_logprobs", n + 1, where)
    expected = [prompt.prompt_ids[-1], *prompt.continuation_ids]
    logprobs: list[float | None] = []
    top1: list[int | None] = []
    for k, (entry, want) in enumerate(zip(entries, expected, strict=True)):
        if not (isinstance(entry, list) and len(entry) >= 2 and _same(entry[1], want, vocab_size)):
            raise _protocol(
                f"{where}: meta_info.input_token_logprobs[{k}] is {_short(entry)}; it should "
                f"score token {want}"
            )
        if k == 0:
            continue
        logprobs.append(_number(entry[0]))
        top1.append(_top_id(tops[k]))
    return Served(tuple(logprobs), tuple(top1))


def _same(token: Any, want: int, vocab_size: int | None) -> bool:
    clipped = vocab_size is not None and want >= vocab_size - 1 and token == 0
    return token == want or clipped


def _aligned(meta: dict[str, Any], name: str, count: int, where: str) -> list[Any]:
    value = meta.get(name)
    if not isinstance(value, list) or len(value) != count:
        got = f"{len(value)} entries" if isinstance(value, list) else "no list"
        raise _protocol(
            f"{where}: meta_info.{name} has {got}; {count} were asked for (logprob_start_len "
            "one before the continuation)"
        )
    return value


def fetch_served(golden: Golden, url: str, timeout: float = DEFAULT_TIMEOUT_S) -> dict[str, Served]:
    """Score every golden prompt on the server at `url`, one request at a time."""
    endpoint = _endpoint(url)
    return {
        prompt.id: served_numbers(
            prompt, _post(endpoint, request_body(prompt), timeout), golden.vocab_size
        )
        for prompt in golden.prompts
    }


def replay(
    golden_path: Path,
    url: str,
    tolerance: Tolerance | None = None,
    *,
    host: str | None = None,
    expected_digest: str | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> Result:
    """Load the golden file, ask the server which dtype it serves in, score the golden file on
    it and compare: the result to render. Without a `tolerance`, the baked profile's for that
    dtype applies."""
    golden = load_golden(golden_path, expected_digest=expected_digest)
    dtype = served_dtype_of(url, timeout)
    if tolerance is None:
        tolerance = profile_tolerance(dtype, baked_profile())
    report = compare(golden, fetch_served(golden, url, timeout), tolerance)
    host = host or socket.gethostname()
    return Result(
        command=COMMAND,
        data={
            "golden": str(golden_path),
            "model": golden.model,
            "url": url,
            "host": host,
            "served_dtype": dtype,
            **report.to_json(),
        },
        tables=(_table(report),),
        lines=(f"served dtype {dtype}; " + report.summary(),),
        findings=tuple(
            Finding(code="golden_drift", message=line, path=str(golden_path))
            for line in report.findings(host)
        ),
    )


def _base(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise SglxError(
            f"--url {url!r} is not an http(s) URL",
            hint="give the server's base URL, e.g. http://127.0.0.1:30000",
            code="usage",
        )
    return url.rstrip("/")


def _endpoint(url: str) -> str:
    return _base(url) + "/generate"


def _post(endpoint: str, body: dict[str, Any], timeout: float) -> Any:
    return _request(endpoint, timeout, json.dumps(body).encode())


def _request(endpoint: str, timeout: float, data: bytes | None = None) -> Any:
    """The JSON answer of a GET (no `data`) or a POST to `endpoint`, read bounded."""
    method = "GET" if data is None else "POST"
    request = urllib.request.Request(
        endpoint, data=data, headers={"content-type": "application/json"}, method=method
    )
    hint = "is the server up and healthy? (GET /health)"
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read(MAX_RESPONSE_BYTES + 1)
    except urllib.error.HTTPError as exc:
        detail = exc.read(2000).decode("utf-8", "replace").strip()
        raise SglxError(
            f"{method} {endpoint} answered HTTP {exc.code}: {detail[:500]}",
            hint=hint,
            code="environment",
        ) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise SglxError(
            f"{method} {endpoint} failed: {reason}", hint=hint, code="environment"
        ) from None
    if len(raw) > MAX_RESPONSE_BYTES:
        raise _protocol(f"{method} {endpoint} answered more than {MAX_RESPONSE_BYTES >> 20} MiB")
    try:
        return parse_json(raw, path=Path(endpoint), what="server's answer")
    except SglxError as exc:
        message = f"{method} {endpoint} answered something sglx cannot read: {exc.message}"
        raise _protocol(message) from None


def server_info(url: str, timeout: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
    """GET /server_info of the server at `url`: its arguments (model_path, dtype, ...)."""
    info = _request(_base(url) + "/server_info", timeout)
    if not isinstance(info, dict):
        raise _protocol(
            f"GET {_base(url)}/server_info answered {type(info).__name__}, not an object"
        )
    return info


def served_dtype_of(url: str, timeout: float = DEFAULT_TIMEOUT_S) -> str:
    """The dtype the server at `url` serves in: its `--dtype` (GET /server_info), or for
    `auto` sglang's rule over the dtype of the checkpoint it loaded (read from `model_path`,
    which this process sees: the replay runs in the server's container)."""
    info = server_info(url, timeout)
    dtype = info.get("dtype")
    model_path = info.get("model_path")
    if not isinstance(dtype, str) or not isinstance(model_path, str):
        raise _protocol(f"GET {_base(url)}/server_info names no dtype and model_path")
    checkpoint = read_model(Path(model_path)).dtype if dtype == "auto" else dtype
    return served_dtype(checkpoint, dtype)


def profile_tolerance(dtype: str, profile: Profile) -> Tolerance:
    """The profile's golden-numerics tolerance for the served `dtype`."""
    entry = profile.gate.numerics.tolerances.get(dtype)  # type: ignore[call-overload]
    if entry is None:
        known = ", ".join(sorted(profile.gate.numerics.tolerances)) or "none"
        raise SglxError(
            f"the {profile.arch} profile sets no gate.numerics tolerance for {dtype}, the dtype "
            f"this server serves in (it sets: {known})",
            hint=f"add gate.numerics.tolerances.{dtype} to the arch profile, or serve in a "
            "dtype it names",
            code="environment",
        )
    return Tolerance(entry.max_abs, entry.mean_abs, entry.min_top1_agreement)


def _protocol(message: str) -> SglxError:
    return SglxError(
        message,
        hint="the server at --url is not sglang's /generate of the version this image ships",
        code="protocol",
    )


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _top_id(entry: Any) -> int | None:
    """The token id of the first `[logprob, token_id, text]` in an input_top_logprobs entry."""
    if isinstance(entry, list) and entry and isinstance(entry[0], list) and len(entry[0]) >= 2:
        token = entry[0][1]
        if isinstance(token, int) and not isinstance(token, bool):
            return token
    return None


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _table(report: GoldenReport) -> Table:
    rows = []
    for p in report.prompts:
        worst = ", ".join(
            f"{w.index}: {w.reference:.4f}->{w.served:.4f}" for w in p.worst if w.served is not None
        )
        rows.append(
            (
                p.id,
                str(p.tokens),
                f"{p.top1_agreement:.3f}",
                "n/a" if p.mean_abs is None else f"{p.mean_abs:.2e}",
                "n/a" if p.max_abs is None else f"{p.max_abs:.2e}",
                worst,
                "pass" if p.passed else "FAIL",
            )
        )
    return Table(
        columns=(
            "prompt",
            "tokens",
            "top-1",
            "mean |Δ|",
            "max |Δ|",
            "worst (token: ref->served)",
            "",
        ),
        rows=tuple(rows),
        title="golden numerics: served log-probabilities of the reference tokens",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sglx_runtime.golden_replay",
        description="Replay the golden file through the served endpoint and compare.",
    )
    parser.add_argument(
        "--golden", type=Path, default=DEFAULT_GOLDEN, help=f"the golden file ({DEFAULT_GOLDEN})"
    )
    parser.add_argument("--url", required=True, help="the server, e.g. http://127.0.0.1:30000")
    # finite here, the range checked by Tolerance: a negative bound is refused in the report
    # (the JSON envelope with --json), nan and inf by the parser
    given = parser.add_argument_group(
        "tolerance",
        "all three, or none: then the baked profile's gate.numerics tolerance for the dtype the "
        "server serves in (GET /server_info)",
    )
    given.add_argument("--max-abs", type=finite("--max-abs"), help="largest |Δ logprob|")
    given.add_argument(
        "--mean-abs", type=finite("--mean-abs"), help="largest mean |Δ logprob| of a prompt"
    )
    given.add_argument(
        "--min-top1", type=finite("--min-top1"), help="least top-1 agreement, 0 to 1"
    )
    parser.add_argument("--digest", help="the golden file's digest from the image label")
    parser.add_argument("--host", help="the host named in findings (default: this hostname)")
    parser.add_argument(
        "--timeout", type=positive("--timeout"), default=DEFAULT_TIMEOUT_S, help="per request, s"
    )
    parser.add_argument("--json", action="store_true", help="print the JSON envelope")
    args = parser.parse_args(argv)
    bounds = (args.max_abs, args.mean_abs, args.min_top1)
    if any(b is not None for b in bounds) and not all(b is not None for b in bounds):
        parser.error("give --max-abs, --mean-abs and --min-top1 together, or none of them")

    def run() -> Result:
        tolerance = None
        if args.max_abs is not None:
            try:
                tolerance = Tolerance(args.max_abs, args.mean_abs, args.min_top1)
            except ValueError as exc:
                raise SglxError(str(exc), hint="check the tolerances given", code="usage") from None
        _base(args.url)
        return replay(
            args.golden,
            args.url,
            tolerance,
            host=args.host,
            expected_digest=args.digest,
            timeout=args.timeout,
        )

    return render(result_of(COMMAND, run), as_json=args.json)


if __name__ == "__main__":
    sys.exit(main())
