"""Reading memories back from PostgreSQL, for `ltm memory list` and the gateway's reader.

Read-only: servers, personas, users and the two memory tables, nothing a gateway may not
read. Rows come back as `contracts.memories` models; choosing what a persona sees
and the order are that module's, so that every reader shows the same.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC
from typing import Any, Final

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from contracts import PersonalMemory, ServerMemories, ServerMemory

__all__ = ["MemoryQueries"]

# The server and its personas: a server without any persona still comes back, as one row.
_SERVER: Final = text(
    """
    SELECT p.persona_id, p.persona_lineage_id
    FROM servers AS s LEFT JOIN personas AS p ON p.server_id = s.server_id
    WHERE s.server_disc_id = :server_disc_id
    """
)

_SERVER_MEMORIES: Final = text(
    """
    SELECT m.server_memory_id AS memory_id, m.content, m.tags, m.created_at, m.updated_at,
           m.persona_lineage_id, u.user_disc_id AS teacher_id
    FROM server_memories AS m
    JOIN servers AS s ON s.server_id = m.server_id
    LEFT JOIN users AS u ON u.user_id = m.user_id
    WHERE s.server_disc_id = :server_disc_id
    """
)

_PERSONAL_MEMORIES: Final = text(
    """
    SELECT u.user_disc_id AS owner_id, m.personal_memory_id AS memory_id, m.content, m.tags,
           m.created_at, m.updated_at, m.persona_lineage_id
    FROM personal_memories AS m JOIN users AS u ON u.user_id = m.user_id
    WHERE u.user_disc_id = ANY(:user_ids)
    """
)


def _stored(row: Any) -> dict[str, Any]:
    return {
        "memory_id": row.memory_id,
        "content": row.content,
        "tags": tuple(tag for tag in row.tags if tag is not None),
        "created_at": row.created_at.astimezone(UTC),
        "updated_at": row.updated_at.astimezone(UTC),
        "persona_lineage_id": row.persona_lineage_id,
    }


class MemoryQueries:
    """The memory tables as a persona's reader sees them, every lineage at once."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def server(self, server_disc_id: str) -> ServerMemories | None:
        """The server's personas and memories; None when there is no such server."""
        params = {"server_disc_id": server_disc_id}
        async with self.engine.connect() as connection:
            personas = (await connection.execute(_SERVER, params)).all()
            if not personas:
                return None
            memories = (await connection.execute(_SERVER_MEMORIES, params)).all()
        return ServerMemories(
            server_disc_id=server_disc_id,
            persona_lineages={
                row.persona_id: row.persona_lineage_id
                for row in personas
                if row.persona_id is not None
            },
            memories=tuple(
                ServerMemory(**_stored(row), teacher_id=row.teacher_id) for row in memories
            ),
        )

    async def personal(self, user_ids: Iterable[str]) -> dict[str, tuple[PersonalMemory, ...]]:
        """Each person's personal memories of every lineage (none for someone unknown)."""
        wanted = list(dict.fromkeys(user_ids))
        found: dict[str, list[PersonalMemory]] = {user_id: [] for user_id in wanted}
        if wanted:
            async with self.engine.connect() as connection:
                rows = await connection.execute(_PERSONAL_MEMORIES, {"user_ids": wanted})
                for row in rows:
                    found[row.owner_id].append(PersonalMemory(**_stored(row)))
        return {user_id: tuple(memories) for user_id, memories in found.items()}
