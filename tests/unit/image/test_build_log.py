"""What a build step printed (sglx.image.build_log): lines however the stream is cut, a line
with no end held and shown only up to MAX_LINE, and the hint a failure's last lines give."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from sglx.image.build_log import CUT, MAX_LINE, Tail, clip, failure_hint, lines


def _cut(data: bytes, at: list[int]) -> list[bytes]:
    points = sorted({0, len(data), *(p % (len(data) + 1) for p in at)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.text(alphabet="ab é\t", max_size=30), max_size=8),
    st.lists(st.integers(min_value=0, max_value=400), max_size=6),
)
def test_the_lines_are_the_same_however_the_stream_is_cut(texts: list[str], at: list[int]) -> None:
    data = "\n".join(texts).encode()
    expected = [clip(t) for t in data.decode().split("\n")]
    if data.endswith(b"\n") or not data:
        expected = expected[:-1]
    assert list(lines(_cut(data, at))) == expected


def test_a_line_with_no_end_is_cut_and_never_held_whole() -> None:
    """A wheel's build script printing a progress bar with no newline for gigabytes: the
    reader holds at most one chunk beyond MAX_LINE and shows the line's start once."""
    endless = (b"x" * 65536 for _ in range(2000))  # 131 MB, one line
    got = list(lines(iter([b"first\n", *endless, b"\nafter\n"])))
    assert got == ["first", "x" * MAX_LINE + CUT, "after"]


def test_the_tail_keeps_the_last_lines_each_clipped() -> None:
    tail = Tail()
    for n in range(100):
        tail.add(f"line {n}")
    tail.add("y" * (MAX_LINE * 3))
    assert tail.last(3) == ["line 98", "line 99", "y" * MAX_LINE + CUT]
    assert len(tail.last(1000)) == 40


def test_a_full_data_root_gets_a_hint_that_says_so() -> None:
    """The engine's own error ("no space left on device") comes after the build's last lines:
    the hint names the cause and the commands that free the space."""
    otherwise = "the lines above come from the step that failed"
    hint = failure_hint(["deps: installing 125 locked wheels", "write /var/lib/docker/overlay2/"
                         "x/diff/a.so: no space left on device"], otherwise)  # fmt: skip
    assert "data root is full" in hint and "sglx image prune" in hint
    assert failure_hint(["Step 9/44 : RUN false"], otherwise) == otherwise
