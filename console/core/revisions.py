"""A memory's revisions as a person reads them: what each changed, word by word."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from operators.revision_store import Revision

__all__ = ["Piece", "RevisionView", "diff", "revision_views"]

# Words, runs of white space and single punctuation marks: a changed word shows as one
# change, not as a dozen changed letters.
_TOKENS: Final = re.compile(r"\s+|\w+|[^\w\s]")

PieceKind = Literal["same", "removed", "added"]


@dataclass(frozen=True, slots=True)
class Piece:
    kind: PieceKind
    text: str


def diff(before: str | None, after: str | None) -> list[Piece]:
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


@dataclass(frozen=True, slots=True)
class RevisionView:
    revision: Revision
    # The channel of the tool call that made it (its idempotency record); None for a
    # restore, or a call whose record is gone.
    channel_id: str | None
    pieces: list[Piece]

    @property
    def by_console(self) -> bool:
        return self.revision.actor_disc_id.startswith("console:")


def revision_views(
    revisions: Sequence[Revision], channels: Mapping[str, str]
) -> list[RevisionView]:
    """Newest first, as a history page reads best."""
    return [
        RevisionView(
            revision,
            channels.get(revision.tool_call_id),
            diff(revision.content_before, revision.content_after),
        )
        for revision in reversed(revisions)
    ]
