"""What the service layer needs from the outside, declared beside it as protocols.

`worker.service` and the tools' pipelines (`worker.tools`) depend on these alone; the
adapters implement them (`worker.adapters.tool_call_transaction`, `memory_store`, `broker`),
and the composition root (`worker.bootstrap`) wires the concrete ones. Unit tests pass fakes
that implement them. The values they exchange are the core's (`worker.core.records`,
`worker.core.outgoing`).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from contracts import Event, ToolCallCompleted, ToolCallRequested
from worker.core.create import ScopeKey
from worker.core.model import (
    DirectoryMember,
    ForbiddenWrite,
    MemoryWrite,
    StoredUser,
    WrittenMemory,
)
from worker.core.outgoing import OutboxRow, OutgoingEvent, Traceparents
from worker.core.records import Claim, LockedScopes, PlannedCreation, PlannedWrite

__all__ = ["Publisher", "ToolCallStore", "ToolCallTransaction"]


class ToolCallTransaction(Protocol):
    """One transaction for a batch of tool calls: every read and write of the pipeline.

    Writes are sent with the commit where they can be (`create`, `finish`): their errors are
    the commit's, raised when the transaction ends.
    """

    async def claim(self, calls: Sequence[ToolCallRequested]) -> list[Claim]:
        """Records each call in the inbox, with the server's state it runs in; a call whose
        id has a record comes back with that record instead. Ids are distinct."""
        ...

    async def load_directory(self, server_id: int) -> list[DirectoryMember]:
        """The server's current members."""
        ...

    async def load_directories(self, server_ids: Sequence[int]) -> dict[int, list[DirectoryMember]]:
        """The current members of each server, in one read."""
        ...

    async def load_user(self, user_disc_id: str, *, server_id: int) -> StoredUser | None:
        """The user's `users` row, and whether they are excluded in the server."""
        ...

    async def apply(
        self, writes: Sequence[PlannedWrite]
    ) -> list[WrittenMemory | ForbiddenWrite | None]:
        """The writes with their revisions, in order; None where no memory matched, and
        ForbiddenWrite where the edit policy kept the matched memory from the actor."""
        ...

    async def in_other_scope(self, write: MemoryWrite, *, participant_ids: Sequence[str]) -> bool:
        """Whether the id names a memory of the other scope that this call could reach."""
        ...

    async def lock_scopes(self, scopes: Sequence[ScopeKey], *, new_ids: int) -> LockedScopes:
        """Locks the scopes, then reads them, their owners and `new_ids` pairs of ids."""
        ...

    async def create(self, creations: Sequence[PlannedCreation]) -> None:
        """Inserts the new memories with their revisions."""
        ...

    async def finish(
        self, results: Sequence[ToolCallCompleted], events: Sequence[OutgoingEvent]
    ) -> list[OutboxRow]:
        """Records the results and queues the events; the rows come back in `events`' order."""
        ...

    async def mark_published(self, event_ids: Sequence[uuid.UUID]) -> None:
        """Outbox rows the broker confirmed since they were queued: marked in this commit."""
        ...


class ToolCallStore(Protocol):
    """Opens the transactions of batches of tool calls."""

    def transaction(
        self, traceparents: Traceparents | None = None
    ) -> AbstractAsyncContextManager[ToolCallTransaction]:
        """Commits when the block ends normally, rolls back when it raises; `traceparents`:
        the calls' trace contexts, for their outbox rows."""
        ...


class Publisher(Protocol):
    """Sends events to the broker after their transaction committed, each confirmed."""

    async def publish_rows(self, rows: Sequence[OutboxRow], *, in_call: bool = False) -> None:
        """The outbox rows, all confirmed when it returns; raises if any was refused.
        `in_call`: published within the span of the call that wrote them."""
        ...

    async def publish_event(
        self, event: Event, routing_key: str, ttl_ms: int | None, *, replayed: bool = False
    ) -> None:
        """An event the database could not hold (or holds already: `replayed`, an answer
        repeated from the idempotency record), straight to the broker."""
        ...
