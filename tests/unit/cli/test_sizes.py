"""The one size grammar (sglx_core.sizes): every size it shows reads back, every written size
reads as its number times its unit, and nothing else reads as a size."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from sglx_core.sizes import SIZE_PATTERN, UNITS, parse_engine_figure, parse_size

_UNIT_CASES = st.sampled_from(sorted(UNITS)).flatmap(
    lambda unit: st.tuples(
        st.just(unit),
        st.lists(st.booleans(), min_size=len(unit), max_size=len(unit)).map(
            lambda upper: "".join(
                c.upper() if u else c.lower() for c, u in zip(unit, upper, strict=True)
            )
        ),
    )
)


@settings(max_examples=400, deadline=None)
@given(
    st.integers(min_value=0, max_value=10**15 - 1),
    _UNIT_CASES,
    st.sampled_from(["", " "]),
    st.sampled_from(["", " ", "\t"]),
)
def test_a_number_and_a_unit_in_any_case_read_as_their_product(
    number: int, unit: tuple[str, str], space: str, around: str
) -> None:
    name, written = unit
    text = f"{around}{number}{space}{written}{around}"
    assert parse_size(text) == number * UNITS[name]
    assert parse_size(f"{around}{number}{around}") == number


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="0123456789.-+ eEgGiIbBkKmMtT_,x", max_size=20))
def test_only_the_grammar_reads_as_a_size(text: str) -> None:
    """Whatever the text, the answer is a whole number of bytes exactly when the schema's
    pattern (the same grammar, where a profile is validated) matches it."""
    got = parse_size(text)
    matches = re.fullmatch(SIZE_PATTERN, text.strip()) is not None
    assert (got is not None) == matches, (text, got)
    if got is not None:
        assert isinstance(got, int) and got >= 0


def test_a_bare_letter_a_fraction_or_a_sign_is_refused() -> None:
    for text in ("4g", "1.5GB", "-1", "+1", "4 G", "4  GiB", "GiB", "", "1e9", "1_000"):
        assert parse_size(text) is None, text


@settings(max_examples=300, deadline=None)
@given(
    st.decimals(min_value=0, max_value=10**6, places=3, allow_nan=False, allow_infinity=False),
    _UNIT_CASES,
    st.sampled_from(["", " "]),
)
def test_an_engines_figure_reads_as_its_number_times_its_unit(
    number: object, unit: tuple[str, str], space: str
) -> None:
    """`docker stats` and podman print '1.953GiB', '731.2MB', '512kB', '0B'."""
    name, written = unit
    got = parse_engine_figure(f"{number}{space}{written}")
    assert got is not None and abs(got - float(str(number)) * UNITS[name]) <= 1e-6 * max(got, 1)


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=40) | st.text(alphabet="0123456789.-+ eEgGiIbBkKmMtT/n", max_size=24))
def test_an_engines_figure_is_a_finite_size_or_none(text: str) -> None:
    """Whatever the engine printed (`-- / --`, a NaN, a huge or signed number, control
    characters), the answer is None or a finite size in bytes: never an exception."""
    got = parse_engine_figure(text)
    assert got is None or (isinstance(got, float) and 0 <= got < 2**100)
