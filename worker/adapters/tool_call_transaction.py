"""One PostgreSQL transaction for a batch of tool calls: the pipeline's reads and writes, each
run by the module that owns its SQL (`inbox`, `members`, `memory_writes`, `memory_creations`,
`outbox`). Implements `worker.ports.ToolCallTransaction`."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any, Final

import psycopg

from contracts import ToolCallCompleted, ToolCallRequested
from infra.storage.engine import named_cursor, psycopg_sql
from worker.adapters import inbox, members, memory_creations, memory_writes
from worker.adapters.outbox import MARK_PUBLISHED
from worker.core.create import ScopeKey
from worker.core.model import (
    DirectoryMember,
    ForbiddenWrite,
    MemoryWrite,
    StoredUser,
    WrittenMemory,
)
from worker.core.outgoing import OutboxRow, OutgoingEvent, Traceparents
from worker.core.records import (
    Claim,
    LockedScopes,
    PlannedCreation,
    PlannedWrite,
)

__all__ = ["PostgresToolCallTransaction"]

_MARK_PUBLISHED: Final = psycopg_sql(MARK_PUBLISHED)


class PostgresToolCallTransaction:
    """One transaction for a batch of tool calls: every read and write of the pipeline.

    `traceparents`: the trace context of each call (by tool_call_id), kept with its events.
    """

    def __init__(
        self, connection: psycopg.AsyncConnection[Any], traceparents: Traceparents | None = None
    ) -> None:
        self._connection = connection
        self._traceparents: Traceparents = traceparents or {}
        self._cursor: psycopg.AsyncCursor[Any] = named_cursor(connection)

    async def claim(self, calls: Sequence[ToolCallRequested]) -> list[Claim]:
        return await inbox.claim(self._cursor, calls)

    async def load_directory(self, server_id: int) -> list[DirectoryMember]:
        return (await self.load_directories([server_id]))[server_id]

    async def load_directories(self, server_ids: Sequence[int]) -> dict[int, list[DirectoryMember]]:
        return await members.load_directories(self._cursor, server_ids)

    async def lock_scopes(self, scopes: Sequence[ScopeKey], *, new_ids: int) -> LockedScopes:
        return await memory_creations.lock_scopes(self._connection, scopes, new_ids=new_ids)

    async def create(self, creations: Sequence[PlannedCreation]) -> None:
        await memory_creations.create(self._connection, creations)

    async def load_user(self, user_disc_id: str, *, server_id: int) -> StoredUser | None:
        return await members.load_user(self._cursor, user_disc_id, server_id=server_id)

    async def apply(
        self, writes: Sequence[PlannedWrite]
    ) -> list[WrittenMemory | ForbiddenWrite | None]:
        return await memory_writes.apply(self._cursor, writes)

    async def in_other_scope(self, write: MemoryWrite, *, participant_ids: Sequence[str]) -> bool:
        return await memory_writes.in_other_scope(
            self._cursor, write, participant_ids=participant_ids
        )

    async def finish(
        self, results: Sequence[ToolCallCompleted], events: Sequence[OutgoingEvent]
    ) -> list[OutboxRow]:
        return await inbox.finish(self._cursor, results, events, self._traceparents)

    async def mark_published(self, event_ids: Sequence[uuid.UUID]) -> None:
        """Earlier calls' outbox rows, confirmed by the broker since: marked in this commit."""
        if event_ids:
            await self._cursor.execute(_MARK_PUBLISHED, {"event_ids": list(event_ids)})
