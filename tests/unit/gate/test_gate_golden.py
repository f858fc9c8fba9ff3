"""The golden file (sglx_core.gate.golden): its format, the bounded loader whose errors name the
field, the digest, and `compare`'s verdicts and findings."""

from __future__ import annotations

import copy
import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

from sglx_core.errors import SglxError
from sglx_core.gate.golden import (
    BUILTIN_PROMPTS,
    DEFAULT_NEW_TOKENS,
    MAX_GOLDEN_BYTES,
    Prompt,
    canonical_bytes,
    check_prompts,
    file_digest,
    golden_digest,
    load_golden,
    parse_golden,
    read_prompts,
    write_golden,
)
from sglx_core.gate.golden_compare import Served, Tolerance, compare

TOL = Tolerance(max_abs=1e-3, mean_abs=1e-4, min_top1_agreement=0.9)
N = 16


def _document(prompts: int = 3) -> dict[str, Any]:
    """A valid golden document: `prompts` prompts of N continuation tokens."""
    return {
        "format_version": 1,
        "model": "demo",
        "weights_digest": "sha256:" + "ab" * 32,
        "vocab_size": 384,
        "tokenizer": {
            "class": "PreTrainedTokenizerFast",
            "vocab_size": 384,
            "bos_token_id": 0,
            "eos_token_id": 1,
        },
        "generator": {
            "transformers": "5.19.0",
            "torch": "2.14.1",
            "dtype": "float32",
            "device": "cpu",
        },
        "new_tokens": N,
        "prompts": [
            {
                "id": f"p{i}",
                "text": f"prompt {i} — ü",
                "prompt_ids": [0, 10 + i, 20 + i],
                "continuation_ids": [(7 * k + i) % 384 for k in range(N)],
                "logprobs": [-0.5 - 0.01 * k for k in range(N)],
                "top1": [(7 * k + i) % 384 for k in range(N)],
            }
            for i in range(prompts)
        ],
    }


def _write(tmp_path: Path, document: Any, name: str = "golden.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(document))
    return path


def _served_exact(document: dict[str, Any]) -> dict[str, Served]:
    return {p["id"]: Served(tuple(p["logprobs"]), tuple(p["top1"])) for p in document["prompts"]}


# --- format and loader -----------------------------------------------------------------------


def test_a_valid_golden_file_loads_with_every_field(tmp_path: Path) -> None:
    golden = load_golden(_write(tmp_path, _document()))
    assert golden.model == "demo"
    assert golden.weights_digest == "sha256:" + "ab" * 32
    assert golden.tokenizer.class_name == "PreTrainedTokenizerFast"
    assert golden.generator.dtype == "float32"
    assert [p.id for p in golden.prompts] == ["p0", "p1", "p2"]
    assert len(golden.prompts[1].logprobs) == N
    assert golden.prompts[0].text == "prompt 0 — ü"


def test_weights_digest_may_be_null(tmp_path: Path) -> None:
    document = _document()
    document["weights_digest"] = None
    assert load_golden(_write(tmp_path, document)).weights_digest is None


def _broken(change: str) -> dict[str, Any]:
    document = _document()
    exec(change, {"d": document})  # a one-line edit of the valid document
    return document


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            "d['prompts'][2]['logprobs'].pop()",
            "prompts[2].logprobs has 15 values for 16 continuation tokens",
        ),
        ("d['prompts'][1]['top1'].append(3)", "prompts[1].top1 has 17 ids for 16 continuation"),
        ("d['prompts'][0]['logprobs'][4] = 0.5", "prompts[0].logprobs[4] is 0.5"),
        ("d['prompts'][0]['logprobs'][4] = 'x'", 'prompts[0].logprobs[4] is "x"'),
        ("d['prompts'][0]['logprobs'][4] = True", "prompts[0].logprobs[4] is true"),
        ("d['prompts'][1]['prompt_ids'][1] = 384", "prompts[1].prompt_ids[1] is 384"),
        ("d['prompts'][1]['prompt_ids'][0] = -1", "prompts[1].prompt_ids[0] is -1"),
        ("d['prompts'][1]['prompt_ids'] = []", "prompts[1].prompt_ids is not a list of 1 to"),
        ("d['prompts'][2]['continuation_ids'].pop()", "prompts[2].continuation_ids has 15"),
        ("d['prompts'][2]['id'] = 'p0'", "prompts[2].id 'p0' repeats"),
        ("d['prompts'][2]['id'] = '../x'", 'prompts[2].id is "../x"'),
        ("del d['prompts'][0]['text']", "prompts[0].text is missing"),
        ("d['prompts'][0]['extra'] = 1", "prompts[0] has the unknown key 'extra'"),
        ("d['prompts'] = []", "prompts is not a list of 1 to 64 prompts"),
        ("d['format_version'] = 2", "format_version is 2; this sglx reads version 1"),
        ("del d['model']", "model is missing"),
        ("d['model'] = 7", "model is 7, not a string"),
        ("d['vocab_size'] = True", "vocab_size is true, not an integer"),
        ("d['weights_digest'] = 'md5:1'", "weights_digest is not null or 'sha256:'"),
        ("d['generator']['dtype'] = 'bfloat16'", "generator.dtype is 'bfloat16'"),
        ("del d['tokenizer']['class']", "tokenizer.class is missing"),
        ("d['tokenizer'] = []", "tokenizer is not an object"),
        ("d['new_tokens'] = 0", "new_tokens is 0, not an integer from 1 to 256"),
    ],
)
def test_a_malformed_golden_file_fails_naming_the_field(
    tmp_path: Path, change: str, message: str
) -> None:
    path = _write(tmp_path, _broken(change))
    with pytest.raises(SglxError) as caught:
        load_golden(path)
    assert caught.value.message.startswith(f"{path}: {message}")
    assert caught.value.code == "corrupt"
    assert caught.value.hint


def test_a_non_finite_logprob_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "golden.json"
    text = json.dumps(_document()).replace("-0.5,", "NaN,", 1)
    path.write_text(text)
    with pytest.raises(SglxError, match=r"prompts\[0\].logprobs\[0\] is NaN"):
        load_golden(path)


def test_a_missing_golden_file_is_an_error_not_a_skip(tmp_path: Path) -> None:
    with pytest.raises(SglxError, match="cannot read the golden file") as caught:
        load_golden(tmp_path / "golden.json")
    assert caught.value.code == "not_found"


def test_an_oversized_golden_file_is_refused_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "golden.json"
    with path.open("wb") as handle:  # sparse: costs no disk
        handle.truncate(MAX_GOLDEN_BYTES + 1)
    with pytest.raises(SglxError, match="larger than 8 MiB") as caught:
        load_golden(path)
    assert caught.value.code == "too_large"


def test_a_fifo_in_place_of_the_golden_file_is_refused_without_hanging(tmp_path: Path) -> None:
    path = tmp_path / "golden.json"
    os.mkfifo(path)
    with pytest.raises(SglxError, match="is a FIFO, not a regular file"):
        load_golden(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "is not valid JSON"),
        ('{"model": 1, "model": 2}', "repeats the key 'model'"),
        ("[" * 100 + "]" * 100, "nested more than 64 levels"),
        ("[]", "(top level) is not an object"),
    ],
)
def test_golden_json_that_is_not_a_document_is_refused(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "golden.json"
    path.write_text(text)
    with pytest.raises(SglxError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_golden(path)


# --- digest and writing ----------------------------------------------------------------------


def test_write_golden_writes_canonical_bytes_whose_digest_is_the_files(tmp_path: Path) -> None:
    document = _document()
    path = tmp_path / "out" / "golden.json"
    digest = write_golden(path, document)
    assert path.read_bytes() == canonical_bytes(document)
    assert digest == golden_digest(document) == file_digest(path)
    assert digest.startswith("sha256:") and len(digest) == 71
    assert load_golden(path, expected_digest=digest).model == "demo"


def test_the_digest_ignores_key_order_and_sees_every_number(tmp_path: Path) -> None:
    document = _document()
    reordered = dict(reversed(list(document.items())))
    assert golden_digest(reordered) == golden_digest(document)
    changed = copy.deepcopy(document)
    changed["prompts"][0]["logprobs"][0] = math.nextafter(-0.5, 0.0)
    assert golden_digest(changed) != golden_digest(document)


def test_a_golden_file_that_does_not_match_its_label_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "golden.json"
    write_golden(path, _document())
    with pytest.raises(SglxError, match="the image label says") as caught:
        load_golden(path, expected_digest="sha256:" + "0" * 64)
    assert caught.value.code == "digest_mismatch"


def test_write_golden_refuses_an_invalid_document(tmp_path: Path) -> None:
    path = tmp_path / "golden.json"
    with pytest.raises(SglxError, match=r"prompts\[2\].logprobs has 15 values"):
        write_golden(path, _broken("d['prompts'][2]['logprobs'].pop()"))
    assert not path.exists()


# --- prompts ---------------------------------------------------------------------------------


def test_the_builtin_prompt_set_is_varied_and_valid() -> None:
    check_prompts(BUILTIN_PROMPTS)
    assert DEFAULT_NEW_TOKENS == 16
    texts = [p.text for p in BUILTIN_PROMPTS]
    assert 5 <= len(texts) <= 8
    assert any(not t.isascii() for t in texts)
    assert any(any(c.isdigit() for c in t) for t in texts)
    assert any("def " in t for t in texts)


def test_user_prompts_load_and_ids_must_not_clash_with_the_builtins(tmp_path: Path) -> None:
    mine = tmp_path / "prompts.json"
    mine.write_text(json.dumps([{"id": "mine", "text": "Once upon a time"}]))
    assert read_prompts(mine) == (Prompt("mine", "Once upon a time"),)
    with pytest.raises(SglxError, match=r"prompts\[6\].id 'code' is used twice"):
        check_prompts((*BUILTIN_PROMPTS, Prompt("code", "x")))
    mine.write_text(json.dumps([{"id": "a", "text": "x", "more": 1}]))
    with pytest.raises(SglxError, match=r"prompts\[0\] is not an object"):
        read_prompts(mine)


# --- compare ---------------------------------------------------------------------------------


def test_served_numbers_equal_to_the_reference_pass() -> None:
    document = _document()
    report = compare(parse_golden(document), _served_exact(document), TOL)
    assert report.passed
    assert report.top1_agreement == 1.0
    assert report.mean_abs == 0.0 and report.max_abs == 0.0
    assert report.findings("gpu-07") == ()
    assert all(p.passed and p.finding is None for p in report.prompts)
    assert "pass" in report.summary()


def test_small_differences_within_tolerance_pass_and_report_the_worst_positions() -> None:
    document = _document()
    served = _served_exact(document)
    logprobs = list(served["p1"].logprobs)
    logprobs[5] += 5e-4
    logprobs[9] -= 2e-4
    served["p1"] = Served(tuple(logprobs), served["p1"].top1)
    report = compare(parse_golden(document), served, TOL)
    assert report.passed
    p1 = report.prompts[1]
    assert p1.max_abs == pytest.approx(5e-4)
    assert p1.mean_abs == pytest.approx(7e-4 / N)
    assert [w.index for w in p1.worst[:2]] == [5, 9]
    assert p1.worst[0].token_id == document["prompts"][1]["continuation_ids"][5]
    assert p1.worst[0].reference == document["prompts"][1]["logprobs"][5]


def test_drift_fails_naming_the_host_the_prompt_and_the_positions() -> None:
    document = _document()
    served = _served_exact(document)
    logprobs = list(served["p2"].logprobs)
    for index in (3, 7, 12):
        logprobs[index] -= 0.25
    served["p2"] = Served(tuple(logprobs), served["p2"].top1)
    report = compare(parse_golden(document), served, TOL)
    assert not report.passed
    assert [p.passed for p in report.prompts] == [True, True, False]
    [finding] = report.findings("gpu-07")
    assert finding.startswith("host gpu-07: prompt 'p2': ")
    assert "continuation tokens 3, 7, 12:" in finding
    assert "max |Δ logprob| 0.25 > 0.001" in finding
    assert report.prompts[2].drifting == (3, 7, 12)
    assert json.loads(json.dumps(report.to_json()))["prompts"][2]["passed"] is False


def test_top1_disagreement_below_the_minimum_fails_and_names_the_positions() -> None:
    document = _document()
    served = _served_exact(document)
    top1 = list(served["p0"].top1)
    top1[2] = top1[11] = 999
    served["p0"] = Served(served["p0"].logprobs, tuple(top1))
    report = compare(parse_golden(document), served, TOL)
    assert report.prompts[0].top1_agreement == 14 / 16
    [finding] = report.findings()
    assert finding.startswith("prompt 'p0': ")
    assert "tokens 2, 11:" in finding and "top-1 agreement 0.875 (14/16) < 0.9" in finding
    one_flip = dict(served)
    top1[11] = document["prompts"][0]["top1"][11]
    one_flip["p0"] = Served(served["p0"].logprobs, tuple(top1))
    assert compare(parse_golden(document), one_flip, TOL).passed  # 15/16 >= 0.9


def test_a_mean_above_tolerance_fails_even_when_every_position_is_below_the_max() -> None:
    document = _document()
    served = _served_exact(document)
    served["p0"] = Served(tuple(v - 9e-4 for v in served["p0"].logprobs), served["p0"].top1)
    report = compare(parse_golden(document), served, TOL)
    assert not report.passed
    assert "mean |Δ logprob| 0.0009 > 0.0001" in report.prompts[0].finding  # type: ignore[operator]


def test_missing_or_non_finite_served_values_fail_never_pass() -> None:
    document = _document()
    served = _served_exact(document)
    logprobs: list[float | None] = list(served["p1"].logprobs)
    logprobs[4] = None
    logprobs[6] = math.nan
    served["p1"] = Served(tuple(logprobs), served["p1"].top1)
    del served["p2"]
    report = compare(parse_golden(document), served, TOL)
    assert [p.passed for p in report.prompts] == [True, False, False]
    assert "no served log-probability at 2 of 16 tokens" in (report.prompts[1].finding or "")
    assert report.prompts[1].drifting == (4, 6)
    assert report.prompts[2].mean_abs is None
    assert "16 of 16" in (report.prompts[2].finding or "")


def test_tolerance_refuses_impossible_values() -> None:
    with pytest.raises(ValueError, match="max_abs"):
        Tolerance(-1.0, 0.0, 1.0)
    with pytest.raises(ValueError, match="min_top1_agreement"):
        Tolerance(1.0, 1.0, 1.5)
