"""The repository documents itself: nothing refers to a specification kept outside it, every
relative link of the documentation leads to a file (and heading) that exists, the README stays
short and begins with the commands CI runs, and the facts the code owns (the settings, the
statuses) are the ones the pages show."""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Final
from urllib.parse import unquote

import pytest

from contracts import MemoryStatus
from infra.settings import Settings, environment_variable
from infra.settings_table import BEGIN_MARKER, END_MARKER, settings_table, with_settings_table

ROOT: Final = Path(__file__).resolve().parents[2]
DOCS: Final = ROOT / "docs"
README: Final = ROOT / "README.md"
DOCUMENTATION: Final = (README, *sorted(DOCS.glob("*.md")), ROOT / "bench" / "RESULTS.md")
# The README is the newcomer's page: what the service is, its first commands, a short walk.
README_MOST_LINES: Final = 200

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
        "security.md",
        "development.md",
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


def test_the_readme_is_short() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MOST_LINES, f"README.md has {len(lines)} lines"


def _first_commands(markdown: str) -> list[str]:
    """The commands of the page's first fenced block, comments dropped."""
    block = _FENCED_BLOCK.search(markdown)
    assert block, "no fenced block"
    body = block.group(0).splitlines()[1:-1]
    return [line.split("#", 1)[0].strip() for line in body if line.split("#", 1)[0].strip()]


def test_the_readme_begins_with_the_commands_ci_runs() -> None:
    # CI runs "the README's test command": the first two commands are the newcomer's and CI's.
    assert _first_commands(README.read_text(encoding="utf-8"))[:2] == ["make run", "make test"]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert "make test" in (line.strip() for line in ci)


def test_the_settings_table_is_the_settings() -> None:
    page = (DOCS / "contract.md").read_text(encoding="utf-8")
    assert page.count(BEGIN_MARKER) == 1 and page.count(END_MARKER) == 1
    assert with_settings_table(page) == page, "docs/contract.md's settings: run `make docs`"


def test_every_setting_has_a_row_and_a_description() -> None:
    table = settings_table()
    for name, field in Settings.model_fields.items():
        assert field.description, f"Settings.{name} has no description"
        assert f"| `{environment_variable(name, field)}` |" in table


def test_the_settings_table_is_replaced_in_place() -> None:
    page = f"before\n{BEGIN_MARKER}\n| stale |\n{END_MARKER}\nafter\n"
    rendered = with_settings_table(page)
    assert rendered.startswith(f"before\n{BEGIN_MARKER}\n| variable |")
    assert rendered.endswith(f"|\n{END_MARKER}\nafter\n")
    assert "stale" not in rendered
    with pytest.raises(ValueError, match="markers"):
        with_settings_table("no markers here")


# Variables the pages may name that are not settings: crash tests, the Kubernetes secrets
# script, the console's screenshots.
_OTHER_VARIABLES: Final = re.compile(r"^LTM_(?:FAILPOINTS|K8S_\w+|SCREENSHOTS|TEST\w*)$")
_VARIABLE: Final = re.compile(r"\bLTM_[A-Z0-9_]*[A-Z0-9]\b")


def test_every_variable_the_pages_name_is_a_setting() -> None:
    known = {environment_variable(name, field) for name, field in Settings.model_fields.items()}
    unknown = []
    for page in DOCUMENTATION:
        for variable in set(_VARIABLE.findall(page.read_text(encoding="utf-8"))):
            setting = variable if variable in known else variable.removesuffix("_FILE")
            if setting not in known and not _OTHER_VARIABLES.match(variable):
                unknown.append(f"{page.relative_to(ROOT)}: {variable}")
    assert not unknown, "\n".join(sorted(unknown))


def test_every_status_is_described() -> None:
    behaviour = (DOCS / "behaviour.md").read_text(encoding="utf-8")
    missing = [status.value for status in MemoryStatus if f"`{status.value}`" not in behaviour]
    assert not missing, missing


def test_the_architecture_says_where_things_happen() -> None:
    anchors = _anchors((DOCS / "architecture.md").read_text(encoding="utf-8"))
    assert anchors >= {
        "where-things-happen",
        "where-each-status-is-decided",
        "where-each-row-is-written",
        "where-each-event-leaves",
        "where-a-message-is-acked-nacked-or-dead-lettered",
    }
