"""What a change did to a memory's text, word by word: the pieces kept, removed and added, and
the same marked up on one line for a terminal (`[-removed-]{+added+}`, as `git diff
--word-diff=plain` writes it)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

__all__ = ["Piece", "PieceKind", "marked_diff", "word_diff"]

# Words, runs of white space and single punctuation marks: a changed word shows as one
# change, not as a dozen changed letters.
_TOKENS: Final = re.compile(r"\s+|\w+|[^\w\s]")

PieceKind = Literal["same", "removed", "added"]


@dataclass(frozen=True, slots=True)
class Piece:
    kind: PieceKind
    text: str


def word_diff(before: str | None, after: str | None) -> list[Piece]:
    """`before` into `after` as pieces kept, removed and added; None (no memory) as empty."""
    old, new = _TOKENS.findall(before or ""), _TOKENS.findall(after or "")
    pieces: list[Piece] = []
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for operation, old_from, old_to, new_from, new_to in matcher.get_opcodes():
        if operation == "equal":
            _add(pieces, "same", old[old_from:old_to])
            continue
        _add(pieces, "removed", old[old_from:old_to])
        _add(pieces, "added", new[new_from:new_to])
    return pieces


def _add(pieces: list[Piece], kind: PieceKind, tokens: Sequence[str]) -> None:
    if not tokens:
        return
    text = "".join(tokens)
    if pieces and pieces[-1].kind == kind:
        pieces[-1] = Piece(kind, pieces[-1].text + text)
    else:
        pieces.append(Piece(kind, text))


_MARKS: Final[dict[PieceKind, tuple[str, str]]] = {
    "same": ("", ""),
    "removed": ("[-", "-]"),
    "added": ("{+", "+}"),
}


def marked_diff(pieces: Sequence[Piece]) -> str:
    """The pieces as one text, removals in `[-…-]` and additions in `{+…+}`."""
    return "".join(f"{_MARKS[p.kind][0]}{p.text}{_MARKS[p.kind][1]}" for p in pieces)
