"""The memory tables as the console reads them: finding memories, one memory with its
history, and what the LLM sees of its server. Reads only (the operator role's SELECT)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from operators.memory_listing import every_persona_listing
from operators.revision_store import Revision
from operators.revisions import revision_history

__all__ = ["SEARCH_LIMIT", "FoundMemory", "MemoryFinder", "MemoryRecord", "PersonaLines"]

SEARCH_LIMIT: Final = 200


@dataclass(frozen=True, slots=True)
class FoundMemory:
    scope: str
    memory_id: int
    server_disc_id: str | None  # a server memory's server
    owner_id: str | None  # a personal memory's owner
    teacher_id: str | None
    persona_lineage_id: int
    content: str
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """A memory as it is now (`current` None once deleted), with its revisions."""

    memory_id: int
    current: FoundMemory | None
    revisions: list[Revision]
    # tool_call_id → the channel its call came from (the idempotency record's).
    channels: dict[str, str]
    # The server (a server memory's, or the server of its last change) and the owner.
    server_disc_id: str | None
    owner_id: str | None
    scope: str
    persona_lineage_id: int


@dataclass(frozen=True, slots=True)
class PersonaLines:
    """What one persona of a server sees, as the LLM reads it (`ID:N …` lines)."""

    persona_id: int
    lineage: int
    server_lines: list[str]
    personal_lines: list[str]


def _like(text_: str) -> str:
    escaped = text_.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


# Each filter given narrows: server, user (the owner of a personal memory, the teacher of a
# server one), memory id, and text (case-insensitive substring). A personal memory belongs to
# a server's search when its owner is a current member there (or it is the owner's DM).
_SEARCH: Final = text(
    r"""
    SELECT * FROM (
        SELECT 'server_wide' AS scope, m.server_memory_id AS memory_id, s.server_disc_id,
               NULL AS owner_id, t.user_disc_id AS teacher_id, m.persona_lineage_id,
               m.content, m.updated_at
        FROM server_memories AS m
        JOIN servers AS s ON s.server_id = m.server_id
        LEFT JOIN users AS t ON t.user_id = m.user_id
        WHERE (CAST(:memory_id AS bigint) IS NULL OR m.server_memory_id = :memory_id)
          AND (CAST(:server AS text) IS NULL OR s.server_disc_id = :server)
          AND (CAST(:user_id AS text) IS NULL OR t.user_disc_id = :user_id)
          AND (CAST(:pattern AS text) IS NULL OR m.content ILIKE :pattern ESCAPE '\')
        UNION ALL
        SELECT 'target_user', p.personal_memory_id, NULL, u.user_disc_id, NULL,
               p.persona_lineage_id, p.content, p.updated_at
        FROM personal_memories AS p
        JOIN users AS u ON u.user_id = p.user_id
        WHERE (CAST(:memory_id AS bigint) IS NULL OR p.personal_memory_id = :memory_id)
          AND (CAST(:server AS text) IS NULL OR u.user_disc_id = :server OR EXISTS (
                SELECT 1 FROM guild_members AS gm JOIN servers AS s ON s.server_id = gm.server_id
                WHERE s.server_disc_id = :server AND gm.user_disc_id = u.user_disc_id))
          AND (CAST(:user_id AS text) IS NULL OR u.user_disc_id = :user_id)
          AND (CAST(:pattern AS text) IS NULL OR p.content ILIKE :pattern ESCAPE '\')
    ) AS found
    ORDER BY updated_at DESC, memory_id DESC
    LIMIT :limit
    """
)

_CHANNELS: Final = text(
    "SELECT tool_call_id, channel_id FROM tool_call_inbox WHERE tool_call_id = ANY(:ids)"
)
_KEYS: Final = text(
    """
    SELECT (SELECT server_disc_id FROM servers WHERE server_id = :server_id) AS server_disc_id,
           (SELECT user_disc_id FROM users WHERE user_id = :owner_user_id) AS owner_id
    """
)


def _found(row: Any) -> FoundMemory:
    return FoundMemory(
        scope=row.scope,
        memory_id=row.memory_id,
        server_disc_id=row.server_disc_id,
        owner_id=row.owner_id,
        teacher_id=row.teacher_id,
        persona_lineage_id=row.persona_lineage_id,
        content=row.content,
        updated_at=row.updated_at,
    )


class MemoryFinder:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def search(
        self,
        *,
        server: str | None = None,
        user_id: str | None = None,
        memory_id: int | None = None,
        contains: str | None = None,
        limit: int = SEARCH_LIMIT,
    ) -> list[FoundMemory]:
        """Newest change first, at most `limit`."""
        params = {
            "server": server,
            "user_id": user_id,
            "memory_id": memory_id,
            "pattern": None if contains is None else _like(contains),
            "limit": limit,
        }
        async with self.engine.connect() as connection:
            return [_found(row) for row in await connection.execute(_SEARCH, params)]

    async def record(self, memory_id: int) -> MemoryRecord | None:
        """None when the id names no memory and no revision."""
        found = await self.search(memory_id=memory_id, limit=1)
        current = found[0] if found else None
        revisions = await revision_history(self.engine, memory_id)
        if current is None and not revisions:
            return None
        async with self.engine.connect() as connection:
            ids = [revision.tool_call_id for revision in revisions]
            channels = {
                row.tool_call_id: row.channel_id
                for row in await connection.execute(_CHANNELS, {"ids": ids})
            }
            last = revisions[-1] if revisions else None
            keys = (
                await connection.execute(
                    _KEYS,
                    {
                        "server_id": None if last is None else last.server_id,
                        "owner_user_id": None if last is None else last.owner_user_id,
                    },
                )
            ).one()
        if current is not None:
            scope, lineage = current.scope, current.persona_lineage_id
            server_disc_id = current.server_disc_id or keys.server_disc_id
            owner_id = current.owner_id
        else:
            assert last is not None
            scope, lineage = last.scope, last.persona_lineage_id
            server_disc_id, owner_id = keys.server_disc_id, keys.owner_id
        return MemoryRecord(
            memory_id=memory_id,
            current=current,
            revisions=revisions,
            channels=channels,
            server_disc_id=server_disc_id,
            owner_id=owner_id,
            scope=scope,
            persona_lineage_id=lineage,
        )

    async def as_the_llm_sees(
        self, server_disc_id: str, user_ids: Sequence[str] = ()
    ) -> list[PersonaLines] | None:
        """Each persona of the server: its server memories, and the given people's personal
        ones, as `ID:N …` lines (`ltm memory list`'s). None for an unknown server."""
        listings = await every_persona_listing(self.engine, server_disc_id, user_ids)
        if listings is None:
            return None
        return [
            PersonaLines(
                persona_id=found.persona_id,
                lineage=found.lineage,
                server_lines=found.listing.server_lines(),
                personal_lines=[
                    line
                    for user_id in found.listing.personal
                    for line in found.listing.personal_lines(user_id)
                ],
            )
            for found in listings
        ]
