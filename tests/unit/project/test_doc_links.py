"""Every `docs/...` path that a message, doc or README names, and every relative Markdown link,
points at a file or folder that exists in the repository.

A user who follows "see docs/reference/x.md" from an error message and finds nothing has been
told nothing. The references are found by text, not by importing anything, so a message in a
role, a profile comment or a host check counts as much as one in the CLI.

What counts as a reference to this repository's `docs/`:

- `docs/` followed by path characters (`[A-Za-z0-9_./-]`), where the character before `docs/`
  is not a path or word character: `https://…/docs/x` and `sglang/docs/x` belong to someone
  else and never match. Trailing dots (the end of a sentence) are dropped; `)`, `,` and `#anchor`
  are never part of the match.
- Not an upstream citation: `docs/…` right after an upstream project's name and a space, as
  `(sglang docs/references/environment_variables.md; …)` in a profile comment cites sglang's
  own tree. UPSTREAM below names those projects; add one only for such a citation.
- Not a scratch file a recipe writes beside a doc (`docs/reference/profile.md.tmp` in the
  Makefile): a path ending in `.tmp` is an output, not a reference.

Relative links are checked in every Markdown file: `[text](target)` and `[label]: target`, except
URLs (`scheme:`) and same-page anchors (`#…`), resolved from the file's folder (a leading `/`
from the repository root), outside fenced code blocks.
"""

from __future__ import annotations

import re
import subprocess
from fnmatch import fnmatch
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

# Files a user reads or that produce the messages a user reads.
SCANNED = (
    "README.md",
    "Makefile",
    "docs/*.md",
    "ansible/*.yml",
    "ansible/*.yaml",
    "ansible/*.j2",
    "ansible/*.md",
    "scripts/*.py",
    "plugin/*.py",
    "hostchecks/*.py",
    "images/*.yaml",
    "bench/*.md",
)

DOCS_PATH = re.compile(r"(?<![\w./-])docs/[A-Za-z0-9_./-]+")
# Projects whose own `docs/` tree sglx cites as a source ("sglang docs/references/...").
UPSTREAM = ("sglang", "vllm", "pytorch", "rocm", "transformers")
_CITED = re.compile(r"\b(?:" + "|".join(UPSTREAM) + r")\s+$", re.IGNORECASE)

INLINE_LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
FENCE = re.compile(r"^\s*(```|~~~)")


def project_files() -> list[str]:
    """Tracked files and new ones not yet committed (git's view, so ignored outputs such as
    .venv never count), relative to the repository root."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return sorted(p for p in listed.split("\0") if p and (REPO / p).is_file())


def _scanned(path: str) -> bool:
    """fnmatch's `*` crosses `/`, so `docs/*.md` is every Markdown file under docs/."""
    return any(fnmatch(path, pattern) for pattern in SCANNED)


def docs_references(text: str) -> list[tuple[int, str]]:
    """(line number, path) of each reference to this repository's docs/ in `text`."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for match in DOCS_PATH.finditer(line):
            if _CITED.search(line[: match.start()]):
                continue
            path = match.group().rstrip(".")
            if path.endswith(".tmp"):
                continue
            found.append((number, path))
    return found


def markdown_links(text: str) -> list[tuple[int, str]]:
    """(line number, target without its #anchor) of each relative link outside code fences."""
    found = []
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        targets = [m.group(1) for m in INLINE_LINK.finditer(line)]
        if reference := REFERENCE_LINK.match(line):
            targets.append(reference.group(1))
        for target in targets:
            if URL.match(target) or target.startswith("#"):
                continue
            found.append((number, target.split("#", 1)[0]))
    return found


def test_the_scan_sees_what_it_must_and_nothing_else() -> None:
    """The rules on the cases they were written for, so that a loosened regex fails here."""
    text = (
        "see docs/reference/hosts.md.\n"
        "(docs/reference/a.md#x), [b](docs/reference/b.md)\n"
        "https://example.org/docs/c.md and sglang/docs/d.md\n"
        "# (sglang docs/references/environment_variables.md; wheel:srt/environ.py)\n"
        "$(SGLX) arch schema > docs/reference/profile.md.tmp\n"
    )
    assert docs_references(text) == [
        (1, "docs/reference/hosts.md"),
        (2, "docs/reference/a.md"),
        (2, "docs/reference/b.md"),
    ]
    links = "[a](x.md#part) [b](https://e.org) [c](#here)\n```\n[d](no.md)\n```\n[e]: ../y.md\n"
    assert markdown_links(links) == [(1, "x.md"), (5, "../y.md")]


def test_every_named_docs_path_exists() -> None:
    files = [p for p in project_files() if _scanned(p)]
    assert "README.md" in files and "docs/reference/hosts.md" in files  # the scan found the tree
    missing = [
        f"{path}:{number}: names {ref}, which does not exist"
        for path in files
        for number, ref in docs_references((REPO / path).read_text(errors="replace"))
        if not (REPO / ref).exists()
    ]
    assert not missing, (
        "broken docs/ references:\n  "
        + "\n  ".join(missing)
        + "\nFix: write the doc, or name the one that exists (ls docs/reference/). An upstream "
        "citation reads '<project> docs/...'; see UPSTREAM in this test."
    )


def test_every_relative_markdown_link_resolves() -> None:
    files = [p for p in project_files() if p.endswith(".md")]
    broken = []
    for path in files:
        for number, target in markdown_links((REPO / path).read_text(errors="replace")):
            base = REPO if target.startswith("/") else (REPO / path).parent
            if target and not (base / target.lstrip("/")).exists():
                broken.append(f"{path}:{number}: links to {target}, which does not exist")
    assert not broken, (
        "broken Markdown links:\n  "
        + "\n  ".join(broken)
        + "\nFix: point the link at the file as seen from the linking file's folder, or "
        "create the file."
    )
