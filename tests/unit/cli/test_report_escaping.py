"""Reports echo what they read: the one renderer makes every value printable (issue 37 item 6).
Before, `bundle inspect` printed a bundle's `created` raw: a newline forged a `bundle verified`
line and `ESC[2J` cleared the screen."""

from __future__ import annotations

import io

from hypothesis import given, settings
from hypothesis import strategies as st

from sglx_core.report import Finding, Result, Table, printable, render

FORGED = "2026-12-04\nbundle verified\x1b[2J\x9b31m"


def _text(result: Result) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    render(result, as_json=False, out=out, err=err)
    return out.getvalue(), err.getvalue()


def test_a_forged_value_cannot_add_a_line_or_an_escape_sequence() -> None:
    result = Result(
        ("bundle", "inspect"),
        tables=(Table(("field", "value"), (("created", FORGED),)),),
        findings=(Finding("bundle_scan", FORGED, path=FORGED, hint=FORGED),),
        errors=(Finding("corrupt", FORGED, hint=FORGED),),
    )
    out, err = _text(result)
    for text in (out, err):
        assert "\x1b" not in text and "\x9b" not in text
        assert "\nbundle verified" not in text
        assert "2026-12-04\\nbundle verified\\x1b[2J\\x9b31m" in text
    assert len(out.splitlines()) == 3 + 2  # title-less table (header, rule, one row), finding


def test_lines_keep_their_newlines_and_lose_every_other_control_character() -> None:
    out, _ = _text(Result(("ansible", "vars"), lines=("a: 1\nb: 2\x1b[2J",)))
    assert out == "a: 1\nb: 2\\x1b[2J\n"


@settings(max_examples=300, deadline=None, database=None)
@given(st.text())
def test_printable_text_has_no_control_character(text: str) -> None:
    shown = printable(text)
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in shown)
