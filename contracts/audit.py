"""`memory.created` / `memory.updated` / `memory.deleted` / `memory.restored`: the audit trail of
every change.

The stream keeps these for 30 days and cannot erase one, so they hold no text: `revision_id`
names the `memory_revisions` row that holds the change's texts, where an erasure can reach them
(schema_version 2; version 1 carried `content_before` and `content_after`)."""

from __future__ import annotations

from typing import ClassVar, Literal

from contracts.envelope import Event
from contracts.ids import DiscordId, ToolCallId
from contracts.results import MemoryScope

__all__ = ["MemoryChanged", "MemoryCreated", "MemoryDeleted", "MemoryRestored", "MemoryUpdated"]


class MemoryChanged(Event):
    """Common fields; the concrete event types below fix `event_type`."""

    SCHEMA_VERSION: ClassVar[int] = 2
    schema_version: int = 2

    tool_call_id: ToolCallId
    revision_id: int
    scope: MemoryScope
    memory_id: int
    guild_id: DiscordId | None
    channel_id: DiscordId | None
    owner_id: DiscordId | None
    actor_id: str
    persona_id: int | None
    persona_lineage_id: int


class MemoryCreated(MemoryChanged):
    EVENT_TYPE: ClassVar[str] = "memory.created"
    event_type: Literal["memory.created"] = "memory.created"


class MemoryUpdated(MemoryChanged):
    EVENT_TYPE: ClassVar[str] = "memory.updated"
    event_type: Literal["memory.updated"] = "memory.updated"


class MemoryDeleted(MemoryChanged):
    EVENT_TYPE: ClassVar[str] = "memory.deleted"
    event_type: Literal["memory.deleted"] = "memory.deleted"


class MemoryRestored(MemoryChanged):
    EVENT_TYPE: ClassVar[str] = "memory.restored"
    event_type: Literal["memory.restored"] = "memory.restored"
