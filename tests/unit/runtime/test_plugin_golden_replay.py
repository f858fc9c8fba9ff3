"""`python -m sglx_runtime.golden_replay` against a stand-in for sglang's /generate on
127.0.0.1: the request it sends, how it aligns sglang's answer, and its exit codes (0 pass,
1 drift, 2 a missing golden file or a server that is not sglang's)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from helpers.model_configs import config, write_model
from helpers.profiles import bake

from sglx_core.errors import SglxError
from sglx_core.gate.golden import (
    Generator,
    GoldenPrompt,
    TokenizerInfo,
    golden_document,
    parse_golden,
    write_golden,
)
from sglx_platform.image_profile import PROFILE_ENV
from sglx_runtime.golden_replay import main, request_body, served_numbers

TOLERANCE = ["--max-abs", "1e-3", "--mean-abs", "1e-4", "--min-top1", "0.9"]
PROMPTS = (
    GoldenPrompt("a", "x", (0, 5, 6), (7, 8, 9, 10), (-0.1, -0.2, -0.3, -0.4), (7, 8, 9, 10)),
    GoldenPrompt("b", "y", (4,), (11, 12, 13, 14), (-1.0, -1.5, -2.0, -2.5), (11, 12, 13, 14)),
)
Answer = Callable[[dict[str, Any]], tuple[int, Any]]


def _document() -> dict[str, Any]:
    return golden_document(
        model="demo",
        weights_digest=None,
        vocab_size=384,
        tokenizer=TokenizerInfo("T", 384, 0, 1),
        generator=Generator("5.19.0", "2.14.1"),
        new_tokens=4,
        prompts=PROMPTS,
    )


def sglang_answer(body: dict[str, Any], shift: float = 0.0, flip: int | None = None) -> Any:
    """What sglang 0.5.23 answers: one entry per input token from logprob_start_len on, the
    first with a null log-probability."""
    ids = body["input_ids"]
    start = body["logprob_start_len"]
    prompt = next(p for p in PROMPTS if list(p.prompt_ids + p.continuation_ids) == ids)
    values = [None, *(v + shift for v in prompt.logprobs)]
    tops: list[Any] = [None]
    for k, (value, top) in enumerate(zip(prompt.logprobs, prompt.top1, strict=True)):
        tops.append([[value + shift, 1 if k == flip else top, None]])
    return {
        "text": "",
        "output_ids": [3],
        "meta_info": {
            "input_token_logprobs": [
                [v, t, None] for v, t in zip(values, ids[start:], strict=True)
            ],
            "input_top_logprobs": tops,
            "output_token_logprobs": [[-0.1, 3, None]],
        },
    }


@pytest.fixture
def server_info() -> dict[str, Any]:
    """What the stand-in answers on GET /server_info (tests may change it)."""
    return {"dtype": "float16", "model_path": "/models/model"}


@pytest.fixture
def server(
    server_info: dict[str, Any],
) -> Iterator[tuple[str, list[dict[str, Any]], list[Answer]]]:
    """A stand-in for sglang's /generate and /server_info; tests set answer[0] (for
    /generate) and read the requests /generate received."""
    requests: list[dict[str, Any]] = []
    answer: list[Answer] = [lambda body: (200, sglang_answer(body))]

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            raw = json.dumps(server_info).encode()
            self.send_response(200 if self.path == "/server_info" else 404)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            requests.append(body)
            status, reply = answer[0](body)
            raw = reply if isinstance(reply, bytes) else json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", requests, answer
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


@pytest.fixture
def golden(tmp_path: Path) -> Path:
    path = tmp_path / "golden.json"
    write_golden(path, _document())
    return path


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_the_request_scores_the_continuation_from_one_token_before_it() -> None:
    body = request_body(PROMPTS[0])
    assert body["input_ids"] == [0, 5, 6, 7, 8, 9, 10]
    assert body["logprob_start_len"] == 2
    assert body["return_logprob"] is True and body["top_logprobs_num"] == 1
    assert body["sampling_params"] == {"max_new_tokens": 1, "temperature": 0}
    assert request_body(PROMPTS[1])["logprob_start_len"] == 0


def test_sglangs_answer_is_aligned_to_the_continuation_tokens() -> None:
    served = served_numbers(PROMPTS[0], sglang_answer(request_body(PROMPTS[0])))
    assert served.logprobs == PROMPTS[0].logprobs
    assert served.top1 == PROMPTS[0].top1


def test_the_last_vocabulary_id_reported_as_0_by_sglang_is_accepted() -> None:
    prompt = GoldenPrompt("z", "z", (3,), (383, 5), (-0.1, -0.2), (383, 5))
    answer = {
        "meta_info": {
            "input_token_logprobs": [[None, 3, None], [-0.1, 0, None], [-0.2, 5, None]],
            "input_top_logprobs": [None, [[-0.1, 383, None]], [[-0.2, 5, None]]],
        }
    }
    assert served_numbers(prompt, answer, vocab_size=384).logprobs == (-0.1, -0.2)
    with pytest.raises(SglxError, match="should score token 383"):
        served_numbers(prompt, answer)


def test_an_answer_that_scores_other_tokens_is_a_protocol_error() -> None:
    answer = sglang_answer(request_body(PROMPTS[0]))
    answer["meta_info"]["input_token_logprobs"][2][1] = 99
    with pytest.raises(SglxError, match=r"input_token_logprobs\[2\] is .*score token 8"):
        served_numbers(PROMPTS[0], answer)
    answer["meta_info"]["input_token_logprobs"].pop()
    with pytest.raises(SglxError, match="has 4 entries; 5 were asked for"):
        served_numbers(PROMPTS[0], answer)
    with pytest.raises(SglxError, match="no meta_info"):
        served_numbers(PROMPTS[0], ["not", "sglang"])


def test_a_server_that_matches_the_reference_passes_with_exit_0(
    server: tuple[str, list[dict[str, Any]], list[Answer]],
    golden: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, requests, _ = server
    code, envelope = _run(capsys, "--golden", str(golden), "--url", url, *TOLERANCE)
    assert code == 0, envelope
    assert envelope["status"] == "ok"
    assert envelope["data"]["passed"] is True
    assert [p["id"] for p in envelope["data"]["prompts"]] == ["a", "b"]
    assert [r["logprob_start_len"] for r in requests] == [2, 0]


def test_a_drifting_server_exits_1_naming_host_prompt_and_positions(
    server: tuple[str, list[dict[str, Any]], list[Answer]],
    golden: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, _, answer = server
    # prompt 'b' (the one starting with token 4) comes back 0.05 lower at every token
    answer[0] = lambda body: (200, sglang_answer(body, shift=-0.05 * (body["input_ids"][0] == 4)))
    code, envelope = _run(
        capsys, "--golden", str(golden), "--url", url, "--host", "gpu-07", *TOLERANCE
    )
    assert code == 1
    [finding] = envelope["findings"]
    assert finding["code"] == "golden_drift"
    assert finding["message"].startswith(
        "host gpu-07: prompt 'b': served numbers drift from the reference at continuation "
        "tokens 0, 1, 2, 3:"
    )


def test_the_table_shows_every_prompt_and_the_verdict(
    server: tuple[str, list[dict[str, Any]], list[Answer]],
    golden: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, _, answer = server
    answer[0] = lambda body: (200, sglang_answer(body, flip=1))
    code = main(["--golden", str(golden), "--url", url, "--host", "h1", *TOLERANCE])
    out = capsys.readouterr().out
    assert code == 1  # 3/4 top-1 agreement < 0.9
    assert "golden numerics" in out and "FAIL" in out
    assert "host h1: prompt 'a'" in out and "top-1 agreement 0.750 (3/4)" in out


def test_a_missing_golden_file_exits_2_never_skips(
    server: tuple[str, list[dict[str, Any]], list[Answer]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, requests, _ = server
    code, envelope = _run(capsys, "--golden", str(tmp_path / "none.json"), "--url", url, *TOLERANCE)
    assert code == 2
    assert envelope["status"] == "error"
    assert "cannot read the golden file" in envelope["errors"][0]["message"]
    assert requests == []


def test_a_malformed_golden_file_exits_2_naming_the_field(
    server: tuple[str, list[dict[str, Any]], list[Answer]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, _, _ = server
    document = _document()
    document["prompts"][1]["logprobs"].pop()
    path = tmp_path / "golden.json"
    path.write_text(json.dumps(document))
    code, envelope = _run(capsys, "--golden", str(path), "--url", url, *TOLERANCE)
    assert code == 2
    assert (
        "prompts[1].logprobs has 3 values for 4 continuation tokens"
        in (envelope["errors"][0]["message"])
    )


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ((500, {"error": "boom"}), "answered HTTP 500"),
        ((200, b"<html>"), "is not valid JSON"),
        ((200, {"text": "no logprobs"}), "has no meta_info object"),
    ],
)
def test_a_server_that_is_not_sglangs_exits_2(
    server: tuple[str, list[dict[str, Any]], list[Answer]],
    golden: Path,
    capsys: pytest.CaptureFixture[str],
    reply: tuple[int, Any],
    message: str,
) -> None:
    url, _, answer = server
    answer[0] = lambda body: reply
    code, envelope = _run(capsys, "--golden", str(golden), "--url", url, *TOLERANCE)
    assert code == 2
    assert message in envelope["errors"][0]["message"]


def test_bad_tolerances_and_urls_are_usage_errors(
    golden: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    negative = ["--max-abs", "-1", "--mean-abs", "0", "--min-top1", "1"]
    code, envelope = _run(capsys, "--golden", str(golden), "--url", "http://x:1", *negative)
    assert code == 2 and "max_abs" in envelope["errors"][0]["message"]
    code, envelope = _run(capsys, "--golden", str(golden), "--url", "ftp://x", *TOLERANCE)
    assert code == 2 and "not an http(s) URL" in envelope["errors"][0]["message"]


def test_the_golden_document_used_here_is_valid() -> None:
    assert parse_golden(_document()).new_tokens == 4


def _profile_with(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **tolerances: Any) -> None:
    """Bake the cpu profile with these gate.numerics tolerances and point SGLX_PROFILE at it."""
    path = bake("cpu", tmp_path / "arch.yaml", gate={"numerics": {"tolerances": tolerances}})
    monkeypatch.setenv(PROFILE_ENV, str(path))


LOOSE = {"max_abs": 1.0, "mean_abs": 1.0, "min_top1_agreement": 0.0, "source": "test"}
TIGHT = {"max_abs": 1e-3, "mean_abs": 1e-4, "min_top1_agreement": 0.9, "source": "test"}


def test_without_given_bounds_the_profile_tolerance_of_the_served_dtype_applies(
    server: tuple[str, list[dict[str, Any]], list[Answer]],
    server_info: dict[str, Any],
    golden: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, _, answer = server
    answer[0] = lambda body: (200, sglang_answer(body, shift=-0.05))
    _profile_with(tmp_path, monkeypatch, float16=LOOSE, bfloat16=TIGHT)
    code, envelope = _run(capsys, "--golden", str(golden), "--url", url)
    assert code == 0, envelope
    assert envelope["data"]["served_dtype"] == "float16"
    assert envelope["data"]["tolerance"]["max_abs"] == 1.0
    server_info["dtype"] = "bfloat16"  # a --dtype bfloat16 server: bfloat16's bounds
    code, envelope = _run(capsys, "--golden", str(golden), "--url", url)
    assert code == 1 and envelope["data"]["served_dtype"] == "bfloat16"


def test_dtype_auto_is_resolved_from_the_served_checkpoint(
    server: tuple[str, list[dict[str, Any]], list[Answer]],
    server_info: dict[str, Any],
    golden: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, _, _ = server
    model = write_model(tmp_path / "model", config("qwen2.5-0.5b", torch_dtype="float32"))
    server_info.update(dtype="auto", model_path=str(model))
    _profile_with(tmp_path, monkeypatch, float16=TIGHT)
    code, envelope = _run(capsys, "--golden", str(golden), "--url", url)
    assert code == 0, envelope
    assert envelope["data"]["served_dtype"] == "float16"  # sglang serves float32 as float16


def test_a_served_dtype_the_profile_has_no_tolerance_for_fails_with_exit_2(
    server: tuple[str, list[dict[str, Any]], list[Answer]],
    golden: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, requests, _ = server
    _profile_with(tmp_path, monkeypatch, bfloat16=TIGHT)
    code, envelope = _run(capsys, "--golden", str(golden), "--url", url)
    assert code == 2
    message = envelope["errors"][0]["message"]
    assert "sets no gate.numerics tolerance for float16" in message and "bfloat16" in message
    assert requests == []


def test_bounds_are_given_all_three_or_none(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["--url", "http://127.0.0.1:1", "--max-abs", "1"])
    assert stopped.value.code == 2
    assert "together, or none of them" in capsys.readouterr().err
