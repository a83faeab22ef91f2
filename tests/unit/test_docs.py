"""The repository documents itself: nothing refers to a specification kept outside it, and
every relative link of the documentation leads to a file (and heading) that exists."""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Final
from urllib.parse import unquote

import pytest

ROOT: Final = Path(__file__).resolve().parents[2]
DOCS: Final = ROOT / "docs"
DOCUMENTATION: Final = (ROOT / "README.md", *sorted(DOCS.glob("*.md")))

# Version control, the virtualenv and what tools generate: not the repository's own text.
_SKIPPED_DIRECTORIES: Final = frozenset(
    {
        ".git",
        ".venv",
        "__pycache__",
        ".mypy_cache",
        ".ruff_cache",
        ".pytest_cache",
        ".hypothesis",
        ".cluster",
        "build",
        "dist",
    }
)

# The names of the specification files this project was once described by, and the folder
# beside the repository they lived in. Written with a bracket so that this file does not
# match itself. The names that are words of their own (a constant may be called FACTS) count
# only with their `.md`.
_OUTSIDE_REFERENCE: Final = re.compile(
    r"\b(?:[B]EHAVIOUR|[A]RCHITECTURE|[L]IFECYCLE)\b"
    r"|\b(?:[C]ONTRACT|[S]ECURITY|[F]ACTS)\.md\b"
    r"|\.\./[s]hared\b"
    r"|/[w]ork/shared\b"
)

_FENCED_BLOCK: Final = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
_INLINE_CODE: Final = re.compile(r"`[^`\n]*`")
_LINK: Final = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING: Final = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
_DOCS_PAGE: Final = re.compile(r"\bdocs/([A-Za-z0-9_-]+\.md)\b")


def _repository_files() -> Iterator[Path]:
    for folder, directories, files in os.walk(ROOT):
        # Pruned in place, so that the walk does not descend into them at all.
        directories[:] = sorted(
            name
            for name in directories
            if name not in _SKIPPED_DIRECTORIES and not name.endswith(".egg-info")
        )
        for name in sorted(files):
            if name not in _SKIPPED_DIRECTORIES:  # a worktree's `.git` is a file
                yield Path(folder, name)


def _text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return None  # not text


def _prose(markdown: str) -> str:
    """The Markdown without code: links and headings in code are examples, not links."""
    return _INLINE_CODE.sub("", _FENCED_BLOCK.sub("", markdown))


def _anchor(heading: str) -> str:
    """The anchor a heading gets on GitHub: lower case, punctuation dropped, spaces as `-`."""
    text = _INLINE_CODE.sub(lambda match: match.group(0).strip("`"), heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    kept = "".join(
        character
        for character in text.lower()
        if character in " -_" or unicodedata.category(character)[0] in "LN"
    )
    return kept.replace(" ", "-")


def _anchors(markdown: str) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for heading in _HEADING.findall(_FENCED_BLOCK.sub("", markdown)):
        anchor = _anchor(heading)
        count = seen.get(anchor, 0)
        seen[anchor] = count + 1
        found.add(anchor if count == 0 else f"{anchor}-{count}")
    return found


def _relative_links(page: Path) -> Iterator[str]:
    for target in _LINK.findall(_prose(page.read_text(encoding="utf-8"))):
        if not re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, mailto:…
            yield target


def test_the_documentation_pages_exist() -> None:
    names = {page.name for page in DOCUMENTATION if page.parent == DOCS}
    assert names >= {
        "README.md",
        "behaviour.md",
        "contract.md",
        "architecture.md",
        "operations.md",
    }


def test_nothing_refers_to_a_specification_outside_the_repository() -> None:
    offenders = []
    for path in _repository_files():
        text = _text(path)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            if _OUTSIDE_REFERENCE.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_the_check_recognizes_a_reference_outside() -> None:
    # The names are put together here, so that this file itself stays clean.
    references = (
        "BEHAV" + "IOUR",
        "CONTRACT" + ".md",
        "see LIFE" + "CYCLE.md §1",
        "FACTS" + ".md",
        "../" + "shared",
    )
    for reference in references:
        assert _OUTSIDE_REFERENCE.search(reference), reference
    own_words = ("docs/behaviour.md", "docs/contract.md", "architecture.md#the-flow", "FACTS: 8")
    for own in own_words:
        assert not _OUTSIDE_REFERENCE.search(own), own


@pytest.mark.parametrize("page", DOCUMENTATION, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_leads_somewhere(page: Path) -> None:
    broken = []
    for target in _relative_links(page):
        path_part, _, fragment = target.partition("#")
        destination = (page.parent / unquote(path_part)).resolve() if path_part else page
        if not destination.exists():
            broken.append(f"{target}: no such file")
            continue
        anchors = (
            _anchors(destination.read_text(encoding="utf-8"))
            if destination.suffix == ".md"
            else None
        )
        if fragment and anchors is not None and unquote(fragment) not in anchors:
            broken.append(f"{target}: no such heading")
    assert not broken, "\n".join(broken)


def test_every_docs_page_named_in_the_repository_exists() -> None:
    missing = []
    for path in _repository_files():
        text = _text(path)
        if text is None:
            continue
        for name in _DOCS_PAGE.findall(text):
            if not (DOCS / name).is_file():
                missing.append(f"{path.relative_to(ROOT)}: docs/{name}")
    assert not missing, "\n".join(missing)


def test_anchors_are_made_as_github_makes_them() -> None:
    assert _anchor("`tool_call.requested`") == "tool_callrequested"
    assert _anchor("Where a message is acked, nacked or dead-lettered") == (
        "where-a-message-is-acked-nacked-or-dead-lettered"
    )
    assert _anchor("`memory.*` audit events") == "memory-audit-events"
    assert _anchors("# A\n## A\n```\n# not a heading\n```\n") == {"a", "a-1"}
