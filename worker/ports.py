"""What the service layer needs from the database, declared beside it as protocols: the unit
of work of a batch of tool calls, its repositories, and the store that opens it.

`worker.service` and the tools' pipelines (`worker.tools`) depend on these alone. The
repositories are implemented each by the adapter module that owns its SQL
(`worker.adapters.inbox`, `members`, `memory_writes`, `memory_creations`, `outbox`), the unit
of work and its store by `worker.adapters.memory_store`; the composition root
(`ltm.composition`) wires the concrete ones. Unit tests pass fakes that implement them. The
values they exchange are the core's (`worker.core.records`, `worker.core.outgoing`).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from contracts import ToolCallCompleted, ToolCallRequested
from worker.core.create import ScopeKey
from worker.core.model import (
    DirectoryMember,
    ForbiddenWrite,
    MemoryWrite,
    StaleWrite,
    StoredUser,
    WrittenMemory,
)
from worker.core.outgoing import OutboxRow, OutgoingEvent, Traceparents
from worker.core.records import Claim, LockedScopes, PlannedCreation, PlannedWrite

__all__ = [
    "Inbox",
    "Members",
    "MemoryWrites",
    "OutboxMarks",
    "ScopeCreations",
    "ToolCallStore",
    "ToolCallTransaction",
]


class Inbox(Protocol):
    """The calls' inbox: each claimed once, answered once, its answer kept for a repeat."""

    async def claim(self, calls: Sequence[ToolCallRequested]) -> list[Claim]:
        """Records each call, with the server's state it runs in; a call whose id has a
        record comes back with that record instead. Ids are distinct."""
        ...

    async def finish(
        self, results: Sequence[ToolCallCompleted], events: Sequence[OutgoingEvent]
    ) -> list[OutboxRow]:
        """Records the answers and queues the events; the rows come back in `events`' order.
        Sent with the commit: its errors are the commit's."""
        ...


class Members(Protocol):
    """Who a call's names are resolved among."""

    async def load_directory(self, server_id: int) -> list[DirectoryMember]:
        """The server's current members."""
        ...

    async def load_directories(self, server_ids: Sequence[int]) -> dict[int, list[DirectoryMember]]:
        """The current members of each server, in one read."""
        ...

    async def load_user(self, user_disc_id: str, *, server_id: int) -> StoredUser | None:
        """The user's `users` row, and whether they are excluded in the server."""
        ...


class MemoryWrites(Protocol):
    """Changes and deletions of existing memories (the update tool's)."""

    async def apply(
        self, writes: Sequence[PlannedWrite]
    ) -> list[WrittenMemory | ForbiddenWrite | StaleWrite | None]:
        """The writes with their revisions, in order; None where no memory matched,
        ForbiddenWrite where the edit policy kept the matched memory from the actor, and
        StaleWrite where it changed since the revision the LLM was shown (`context.seen`)."""
        ...

    async def in_other_scope(self, write: MemoryWrite, *, participant_ids: Sequence[str]) -> bool:
        """Whether the id names a memory of the other scope that this call could reach."""
        ...


class ScopeCreations(Protocol):
    """New memories in their scopes (the create tool's): the scopes locked, then added to."""

    async def lock(self, scopes: Sequence[ScopeKey], *, new_ids: int) -> LockedScopes:
        """Locks the scopes, then reads them, their owners and `new_ids` pairs of ids."""
        ...

    async def add(self, creations: Sequence[PlannedCreation]) -> None:
        """Inserts the new memories with their revisions. Sent with the commit: its errors
        are the commit's."""
        ...


class OutboxMarks(Protocol):
    """The outbox, as a batch's transaction touches it."""

    async def mark_published(self, event_ids: Sequence[uuid.UUID]) -> None:
        """Outbox rows the broker confirmed since they were queued: marked in this commit."""
        ...


class ToolCallTransaction(Protocol):
    """The unit of work of a batch of tool calls: one transaction, every read and write of
    the pipeline through its repositories, committed as a block."""

    @property
    def inbox(self) -> Inbox: ...

    @property
    def members(self) -> Members: ...

    @property
    def memories(self) -> MemoryWrites: ...

    @property
    def scopes(self) -> ScopeCreations: ...

    @property
    def outbox(self) -> OutboxMarks: ...


class ToolCallStore(Protocol):
    """Opens the units of work of batches of tool calls."""

    def transaction(
        self, traceparents: Traceparents | None = None
    ) -> AbstractAsyncContextManager[ToolCallTransaction]:
        """Commits when the block ends normally, rolls back when it raises; `traceparents`:
        the calls' trace contexts, for their outbox rows."""
        ...

    async def close(self) -> None:
        """Lets its connections go, for good."""
        ...
