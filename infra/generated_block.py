"""A block of a documentation page made from code (the settings table of docs/contract.md, the
bench's newest run on bench/RESULTS.md): it sits between two comment markers and is replaced
in place, so that the page cannot drift from what it is made from."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

__all__ = ["markdown_cell", "replace_block", "rewrite_page"]


def markdown_cell(text: str) -> str:
    """`text` as one cell of a Markdown table row."""
    # A pipe would end the cell; a line break would end the row.
    return " ".join(text.split()).replace("|", "\\|")


def replace_block(page: str, begin: str, end: str, block: str) -> str:
    """`page` with the text between the markers `begin` and `end` replaced by `block`."""
    before, found_begin, rest = page.partition(begin)
    _, found_end, after = rest.partition(end)
    if not found_begin or not found_end:
        raise ValueError(f"the page lacks the markers {begin!r} and {end!r}")
    return f"{before}{begin}\n{block}\n{end}{after}"


def rewrite_page(
    page: Path, render: Callable[[str], str], *, check: bool, what: str, how: str
) -> int:
    """Writes `render(page's text)` back to `page`; with `check`, changes nothing and returns 1
    when the page differs, saying `what` is out of date and `how` to update it."""
    current = page.read_text(encoding="utf-8")
    rendered = render(current)
    if rendered == current:
        return 0
    if check:
        print(f"{page}: {what} is out of date: run {how}", file=sys.stderr)
        return 1
    page.write_text(rendered, encoding="utf-8")
    print(f"{page}: {what} rewritten")
    return 0
