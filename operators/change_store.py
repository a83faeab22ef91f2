"""The revisions matching an operator's filter, read for `ltm memory changes` and for a
revert, with the server and the channel each change came from.

The server is the revision's (`servers.server_disc_id`: a guild, or the user of a DM); the
channel is that of the tool call that made it, from its idempotency record
(`tool_call_inbox`): none for a restore, or a call whose record was swept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from contracts import RevisionFilter
from operators.revert_plan import MAX_MEMORIES, HistoryEntry
from operators.revision_store import Revision, revision_of

__all__ = ["Change", "ChangeStore", "current_contents", "touched_history"]


@dataclass(frozen=True, slots=True)
class Change:
    """A revision, with the server and the channel it happened in."""

    revision: Revision
    guild_id: str | None
    channel_id: str | None


# Every filter given narrows; one not given (null) lets every revision through. A revision
# whose channel is unknown never matches a channel filter (the comparison is null).
_MATCHES: Final = """
    (CAST(:actor AS text) IS NULL OR r.actor_disc_id = :actor)
    AND (CAST(:guild AS text) IS NULL OR s.server_disc_id = :guild)
    AND (CAST(:channel AS text) IS NULL OR i.channel_id = :channel)
    AND (CAST(:tool_call AS text) IS NULL OR r.tool_call_id = :tool_call)
    AND (CAST(:since AS timestamptz) IS NULL OR r.occurred_at >= :since)
    AND (CAST(:until AS timestamptz) IS NULL OR r.occurred_at < :until)
"""
_JOINED: Final = """
    FROM memory_revisions r
    LEFT JOIN servers s ON s.server_id = r.server_id
    LEFT JOIN tool_call_inbox i ON i.tool_call_id = r.tool_call_id
"""

_CHANGES: Final = text(
    f"""
    SELECT r.*, s.server_disc_id AS guild_id, i.channel_id AS channel_id
    {_JOINED}
    WHERE {_MATCHES}
    ORDER BY r.revision_id DESC
    LIMIT :limit
    """
)

# Every revision of each memory a matching revision touched (one more memory than a revert
# may take, to tell it took too many), each saying whether it matches.
_TOUCHED_HISTORY: Final = text(
    f"""
    WITH touched AS (
        SELECT DISTINCT r.memory_id {_JOINED} WHERE {_MATCHES} LIMIT :memories
    )
    SELECT r.*, ({_MATCHES}) IS TRUE AS matches
    {_JOINED}
    WHERE r.memory_id IN (SELECT memory_id FROM touched)
    ORDER BY r.memory_id, r.revision_id
    """
)

# Locked in id order, so that two reverts of overlapping memories queue rather than deadlock.
_CURRENT: Final = text(
    """
    SELECT server_memory_id AS memory_id, content FROM server_memories
    WHERE server_memory_id = ANY(:ids) ORDER BY server_memory_id FOR UPDATE
    """
)
_CURRENT_PERSONAL: Final = text(
    """
    SELECT personal_memory_id AS memory_id, content FROM personal_memories
    WHERE personal_memory_id = ANY(:ids) ORDER BY personal_memory_id FOR UPDATE
    """
)


def _parameters(revisions: RevisionFilter) -> dict[str, Any]:
    return {
        "actor": revisions.actor_disc_id,
        "guild": revisions.guild_id,
        "channel": revisions.channel_id,
        "tool_call": revisions.tool_call_id,
        "since": revisions.since,
        "until": revisions.until,
    }


class ChangeStore:
    """The revisions an operator looks for."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def changes(self, revisions: RevisionFilter, limit: int) -> list[Change]:
        """The matching revisions, newest first, at most `limit`."""
        async with self.engine.connect() as connection:
            result = await connection.execute(_CHANGES, {**_parameters(revisions), "limit": limit})
            return [Change(revision_of(row), row.guild_id, row.channel_id) for row in result]


async def touched_history(
    connection: AsyncConnection, revisions: RevisionFilter
) -> list[HistoryEntry]:
    """Every revision of the memories a matching revision touched, oldest first (of at most
    `MAX_MEMORIES` + 1 memories)."""
    result = await connection.execute(
        _TOUCHED_HISTORY, {**_parameters(revisions), "memories": MAX_MEMORIES + 1}
    )
    return [HistoryEntry(revision_of(row), bool(row.matches)) for row in result]


async def current_contents(
    connection: AsyncConnection, memory_ids: Sequence[int]
) -> dict[int, str]:
    """The content of those of the memories that exist, locked until the transaction ends."""
    contents: dict[int, str] = {}
    for statement in (_CURRENT, _CURRENT_PERSONAL):
        result = await connection.execute(statement, {"ids": list(memory_ids)})
        contents.update({row.memory_id: row.content for row in result})
    return contents
