"""What the audit page shows: which events match its filter, and each as a row."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from contracts import (
    EVENT_TYPES,
    CacheInvalidate,
    EmbedRequested,
    Event,
    MemoryChanged,
    OperatorAction,
    ToolCallCompleted,
    ToolCallRequested,
)
from operators.display import event_details, shown_text, shown_time
from operators.revision_store import ChangeTexts

__all__ = ["ACTIONS", "AuditFilter", "BadFilter", "event_row", "unreadable_row"]

# The event types the filter offers, in the codec's order.
ACTIONS: Final = tuple(EVENT_TYPES)


class BadFilter(ValueError):
    """A filter field that cannot match anything as typed (a memory id that is no number)."""


@dataclass(frozen=True, slots=True)
class AuditFilter:
    """Each field given narrows the stream: all of them must match."""

    server: str | None = None
    user: str | None = None
    memory: int | None = None
    action: str | None = None

    @classmethod
    def parse(cls, query: Mapping[str, str]) -> AuditFilter:
        """From the page's query string; blank fields are no filter."""
        fields = {name: (query.get(name) or "").strip() or None for name in _FIELDS}
        memory = fields["memory"]
        if memory is not None and not memory.isdigit():
            raise BadFilter(f"memory must be a memory id (digits), not {memory!r}")
        action = fields["action"]
        if action is not None and action not in EVENT_TYPES:
            raise BadFilter(f"action must be one of {', '.join(ACTIONS)}, not {action!r}")
        return cls(
            server=fields["server"],
            user=fields["user"],
            memory=None if memory is None else int(memory),
            action=action,
        )

    @property
    def is_empty(self) -> bool:
        return self == AuditFilter()

    def matches(self, event: Event | None) -> bool:
        """A message that is no event of the contract matches only an empty filter."""
        if event is None:
            return self.is_empty
        if self.action is not None and event.event_type != self.action:
            return False
        if self.server is not None and self.server not in set(_servers(event)):
            return False
        if self.user is not None and self.user not in set(_users(event)):
            return False
        return self.memory is None or self.memory == _memory(event)

    def as_query(self) -> dict[str, str]:
        return {
            name: str(value)
            for name, value in (
                ("server", self.server),
                ("user", self.user),
                ("memory", self.memory),
                ("action", self.action),
            )
            if value is not None
        }


_FIELDS: Final = ("server", "user", "memory", "action")


def _servers(event: Event) -> Iterator[str]:
    """The server keys an event is about: a guild's id, or a user's id for a DM."""
    if isinstance(event, MemoryChanged | ToolCallCompleted | EmbedRequested) and event.guild_id:
        yield event.guild_id
    elif isinstance(event, ToolCallRequested):
        yield event.context.server_disc_id
    elif isinstance(event, CacheInvalidate) and event.cache == "persona_state":
        yield event.key


def _users(event: Event) -> Iterator[str]:
    """Who an event is about or by: actor, owner, triggerer; an operator's `console:<name>`."""
    if isinstance(event, MemoryChanged):
        yield event.actor_id
        if event.owner_id:
            yield event.owner_id
    elif isinstance(event, ToolCallRequested):
        yield event.context.triggerer_id
    elif isinstance(event, CacheInvalidate) and event.cache == "user":
        yield event.key
    elif isinstance(event, OperatorAction):
        yield event.actor


def _memory(event: Event) -> int | None:
    if isinstance(event, MemoryChanged):
        return event.memory_id
    if isinstance(event, ToolCallCompleted):
        return event.data.memory_id
    return None


def event_row(event: Event, offset: int, texts: ChangeTexts | None = None) -> dict[str, Any]:
    """One row of the audit page, as the page's script takes it (JSON); a `memory.*` event's
    texts are its revision's (`texts`), `[erased]` once redacted."""
    memory_id = _memory(event)
    revision_id = event.revision_id if isinstance(event, MemoryChanged) else None
    return {
        "offset": offset,
        "time": shown_time(event.occurred_at),
        "type": event.event_type,
        "memory": memory_id,
        "revision": revision_id,
        "tool_call": event.correlation_id,
        "details": " ".join(event_details(event, texts)),
    }


def unreadable_row(
    offset: int, timestamp: datetime | None, routing_key: str, problem: str
) -> dict[str, Any]:
    return {
        "offset": offset,
        "time": shown_time(timestamp),
        "type": "(not an event)",
        "memory": None,
        "revision": None,
        "tool_call": None,
        "details": f"routing key {routing_key}: {shown_text(problem)}",
    }
