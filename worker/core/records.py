"""What the tools and their database exchange inside a batch's transaction: the inbox's
records of calls, the writes and creations the tools planned, and the scopes locked for them.

Plain values: the service layer and the tools build and read them, the database adapter
stores and loads them (`worker.ports.ToolCallTransaction`).
"""

from __future__ import annotations

from dataclasses import dataclass

from contracts import MemoryStatus, ResultData
from worker.core.create import ExistingMemory, NewMemory, ScopeKey
from worker.core.model import MemoryWrite, ServerState, StoredUser

__all__ = [
    "Claim",
    "LockedOwner",
    "LockedScopes",
    "PlannedCreation",
    "PlannedWrite",
    "StoredResult",
]


@dataclass(frozen=True, slots=True)
class StoredResult:
    """The answer recorded for a tool call, where its first answer went, and the fingerprint
    of that call (None in records from before fingerprints)."""

    status: MemoryStatus
    message: str
    data: ResultData
    tool_name: str
    guild_id: str | None
    channel_id: str
    shard_id: int
    fingerprint: str | None


@dataclass(frozen=True, slots=True)
class Claim:
    """The inbox row is ours (`stored` None), or the call was answered before."""

    stored: StoredResult | None
    state: ServerState | None


@dataclass(frozen=True, slots=True)
class PlannedWrite:
    """A change or deletion the update tool decided on, with who asked and in which call."""

    write: MemoryWrite
    actor: str
    tool_call_id: str


@dataclass(frozen=True, slots=True)
class PlannedCreation:
    """A new memory the create tool decided on, with who asked and in which call."""

    memory: NewMemory
    actor: str
    tool_call_id: str


@dataclass(frozen=True, slots=True)
class LockedOwner:
    """An owner's users row, locked for the transaction, and where they are excluded from
    personalization."""

    user_id: int
    user_disc_id: str
    privacy_level: int
    blacklisted_in: frozenset[int]

    def stored(self, server_id: int) -> StoredUser:
        return StoredUser(
            user_id=self.user_id,
            user_disc_id=self.user_disc_id,
            privacy_level=self.privacy_level,
            blacklisted_here=server_id in self.blacklisted_in,
        )


@dataclass(frozen=True, slots=True)
class LockedScopes:
    """What a batch's creations are decided over, read after their scopes were locked."""

    owners: dict[str, LockedOwner]  # by Discord id; an owner with no users row is absent
    contents: dict[ScopeKey, list[ExistingMemory]]
    new_ids: list[tuple[int, int]]  # (memory_id, revision_id), one pair per creation asked
