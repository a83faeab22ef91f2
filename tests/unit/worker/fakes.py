"""Fakes of the service layer's ports (`worker.ports`) for the unit tests: plain classes that
implement the protocols, no database behind them (mypy holds them to the protocols where the
tests pass them as one)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence

from contracts import ToolCallCompleted, ToolCallRequested, encode_event
from worker.core.create import ScopeKey
from worker.core.model import (
    DirectoryMember,
    ForbiddenWrite,
    MemoryWrite,
    ServerState,
    StaleWrite,
    StoredUser,
    WrittenMemory,
)
from worker.core.outgoing import OutboxRow, OutgoingEvent, outbox_rows
from worker.core.records import (
    Claim,
    LockedScopes,
    PlannedCreation,
    PlannedWrite,
    StoredResult,
)

__all__ = ["GivenFacts"]


class GivenFacts:
    """A unit of work whose reads are answered from fixed facts and whose writes are kept.

    One object plays every repository (their methods' names are distinct), so that the facts
    and what was written are in one place. A call is claimed unless `answered` holds a record
    for its id. The create tool's reads are not given: a test of them would fail here rather
    than pass on made-up facts.
    """

    def __init__(
        self,
        server_state: ServerState | None,
        *,
        directory: Sequence[DirectoryMember] = (),
        users: Mapping[str, StoredUser] | None = None,
        row_exists: bool = True,
        in_other_scope: bool = False,
        forbidden: bool = False,
        stale: StaleWrite | None = None,
        answered: Mapping[str, StoredResult] | None = None,
    ) -> None:
        self.server_state = server_state
        self.directory = list(directory)
        self.users = dict(users or {})
        self.row_exists = row_exists
        self.other_scope = in_other_scope
        self.forbidden = forbidden
        self.stale = stale
        self.answered = dict(answered or {})
        self.applied: list[PlannedWrite] = []
        self.results: list[ToolCallCompleted] = []
        self.queued: list[OutgoingEvent] = []
        self.marked: list[uuid.UUID] = []
        self.inbox = self.members = self.memories = self.scopes = self.outbox = self

    async def claim(self, calls: Sequence[ToolCallRequested]) -> list[Claim]:
        return [
            Claim(stored=stored, state=None)
            if (stored := self.answered.get(call.tool_call_id)) is not None
            else Claim(stored=None, state=self.server_state)
            for call in calls
        ]

    async def load_directory(self, server_id: int) -> list[DirectoryMember]:
        return list(self.directory)

    async def load_directories(self, server_ids: Sequence[int]) -> dict[int, list[DirectoryMember]]:
        return {server_id: list(self.directory) for server_id in server_ids}

    async def load_user(self, user_disc_id: str, *, server_id: int) -> StoredUser | None:
        return self.users.get(user_disc_id)

    async def apply(
        self, writes: Sequence[PlannedWrite]
    ) -> list[WrittenMemory | ForbiddenWrite | StaleWrite | None]:
        self.applied.extend(writes)
        if self.forbidden:
            return [ForbiddenWrite() for _ in writes]
        if self.stale is not None:
            return [self.stale for _ in writes]
        written = WrittenMemory(revision_id=1, content_before="old", persona_lineage_id=42)
        return [written if self.row_exists else None for _ in writes]

    async def in_other_scope(self, write: MemoryWrite, *, participant_ids: Sequence[str]) -> bool:
        return self.other_scope

    async def lock(self, scopes: Sequence[ScopeKey], *, new_ids: int) -> LockedScopes:
        raise AssertionError("no scopes are given to lock")

    async def add(self, creations: Sequence[PlannedCreation]) -> None:
        raise AssertionError("no creations are expected")

    async def finish(
        self, results: Sequence[ToolCallCompleted], events: Sequence[OutgoingEvent]
    ) -> list[OutboxRow]:
        self.results.extend(results)
        self.queued.extend(events)
        return outbox_rows(events, [encode_event(outgoing.event) for outgoing in events])

    async def mark_published(self, event_ids: Sequence[uuid.UUID]) -> None:
        self.marked.extend(event_ids)
