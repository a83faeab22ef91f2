"""Reading memories back from PostgreSQL, for `ltm memory list` and the gateway's reader.

Read-only: servers, personas, users and the two memory tables, nothing a gateway may not
read. Rows come back as `contracts.memories` models; choosing what a persona sees
and the order are that module's, so that every reader shows the same.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC
from typing import Any, Final

from sqlalchemy import Text, any_, bindparam, select
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncEngine

from contracts import PersonalMemory, ServerMemories, ServerMemory
from infra.storage.schema import personal_memories, personas, server_memories, servers, users

__all__ = ["MemoryQueries"]

_SERVER_DISC_ID: Final = bindparam("server_disc_id", type_=Text)

# The server and its personas: a server without any persona still comes back, as one row.
_SERVER: Final = (
    select(personas.c.persona_id, personas.c.persona_lineage_id)
    .select_from(servers.outerjoin(personas, personas.c.server_id == servers.c.server_id))
    .where(servers.c.server_disc_id == _SERVER_DISC_ID)
)

_SERVER_MEMORIES: Final = (
    select(
        server_memories.c.server_memory_id.label("memory_id"),
        server_memories.c.content,
        server_memories.c.tags,
        server_memories.c.created_at,
        server_memories.c.updated_at,
        server_memories.c.persona_lineage_id,
        server_memories.c.revision_id,
        users.c.user_disc_id.label("teacher_id"),
    )
    .select_from(
        server_memories.join(servers, servers.c.server_id == server_memories.c.server_id).outerjoin(
            users, users.c.user_id == server_memories.c.user_id
        )
    )
    .where(servers.c.server_disc_id == _SERVER_DISC_ID)
)

# `= ANY(array)`: one statement whatever the number of people asked about.
_PERSONAL_MEMORIES: Final = (
    select(
        users.c.user_disc_id.label("owner_id"),
        personal_memories.c.personal_memory_id.label("memory_id"),
        personal_memories.c.content,
        personal_memories.c.tags,
        personal_memories.c.created_at,
        personal_memories.c.updated_at,
        personal_memories.c.persona_lineage_id,
        personal_memories.c.revision_id,
    )
    .select_from(personal_memories.join(users, users.c.user_id == personal_memories.c.user_id))
    .where(users.c.user_disc_id == any_(bindparam("user_ids", type_=ARRAY(Text))))
)


def _stored(row: Any) -> dict[str, Any]:
    return {
        "memory_id": row.memory_id,
        "content": row.content,
        "tags": tuple(tag for tag in row.tags if tag is not None),
        "created_at": row.created_at.astimezone(UTC),
        "updated_at": row.updated_at.astimezone(UTC),
        "persona_lineage_id": row.persona_lineage_id,
        "revision_id": row.revision_id,
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
