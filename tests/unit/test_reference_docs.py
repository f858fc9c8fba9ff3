"""docs/reference/profile.md is generated from the schema and must not drift from it."""

from __future__ import annotations

from pathlib import Path

from sglx.profile.reference import render_markdown, schema_rows


def test_profile_reference_matches_the_schema(repo: Path) -> None:
    committed = (repo / "docs" / "reference" / "profile.md").read_text()
    assert committed == render_markdown(), "stale reference: run `make docs` and commit"


def test_every_schema_key_is_documented() -> None:
    undocumented = [r.path for r in schema_rows() if not r.description]
    assert undocumented == []
