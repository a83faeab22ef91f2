"""A memory's revisions as a person reads them: what each changed, word by word."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from operators.revision_store import Revision
from operators.word_diff import Piece, word_diff

__all__ = ["RevisionView", "revision_views"]


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
            word_diff(revision.content_before, revision.content_after),
        )
        for revision in reversed(revisions)
    ]
