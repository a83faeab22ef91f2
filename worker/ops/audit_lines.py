"""The lines of `ltm audit tail`: one per event, fixed columns, what else each event says.
The console's audit page shows the same details (`event_details`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

import orjson

from contracts import (
    CacheInvalidate,
    DeadLettersPurged,
    DeadLettersReplayed,
    EmbedRequested,
    Event,
    MemoryChanged,
    ToolCallCompleted,
    ToolCallRequested,
)
from operators.audit_stream import AuditDelivery
from worker.ops.output import ABSENT, shown_content, shown_text, shown_time, text_width

__all__ = [
    "TAIL_HEADER",
    "compact_json_line",
    "event_details",
    "event_line",
    "unreadable_line",
]


def _columns(*cells: str) -> str:
    """One line of the tail: fixed widths (a stream's widest cell is never known), so that a
    longer cell pushes only its own line."""
    padded = [
        cell + " " * (width - text_width(cell))
        for cell, (_, width) in zip(cells[:-1], _TAIL_COLUMNS, strict=False)
    ]
    return "  ".join([*padded, cells[-1]])


_TAIL_COLUMNS: Final = (
    ("TIME", 24),
    ("EVENT", 19),
    ("MEMORY", 8),
    ("REVISION", 8),
    ("TOOL CALL", 36),
    ("DETAILS", 0),
)
TAIL_HEADER: Final = _columns(*(name for name, _ in _TAIL_COLUMNS))


def event_line(event: Event) -> str:
    """One line under `TAIL_HEADER`: time, event type, memory, revision, tool call, then what
    else the event says."""
    memory_id: int | None = None
    revision_id: int | None = None
    if isinstance(event, MemoryChanged):
        memory_id, revision_id = event.memory_id, event.revision_id
    elif isinstance(event, ToolCallCompleted):
        memory_id = event.data.memory_id
    return _columns(
        shown_time(event.occurred_at, "milliseconds"),
        event.event_type,
        ABSENT if memory_id is None else str(memory_id),
        ABSENT if revision_id is None else str(revision_id),
        shown_text(event.correlation_id),
        " ".join(event_details(event)),
    )


def unreadable_line(delivery: AuditDelivery) -> str:
    message = delivery.message
    return _columns(
        shown_time(message.timestamp, "milliseconds"),
        "(not an event)",
        ABSENT,
        ABSENT,
        shown_text(message.correlation_id),
        f"routing key {message.routing_key}: {shown_text(delivery.problem)}",
    )


def event_details(event: Event) -> Iterator[str]:
    """What else an event says, beyond its time, type, memory, revision and tool call."""
    if isinstance(event, MemoryChanged):
        yield event.scope
        yield f"guild={event.guild_id or 'dm'}"
        if event.owner_id:
            yield f"owner={event.owner_id}"
        yield f"actor={shown_text(event.actor_id)}"
        yield f"before: {shown_content(event.content_before)}"
        yield f"after: {shown_content(event.content_after)}"
    elif isinstance(event, ToolCallCompleted):
        yield event.status.value
        if event.data.scope is not None:
            yield event.data.scope
        yield f"shard={event.shard_id}"
    elif isinstance(event, EmbedRequested):
        yield event.kind
        yield f"channel={event.channel_id}"
        yield f"shard={event.shard_id}"
    elif isinstance(event, CacheInvalidate):
        yield f"cache={event.cache}"
        yield f"key={event.key}"
    elif isinstance(event, ToolCallRequested):
        yield shown_text(event.tool_name)
        yield f"guild={event.context.guild_id or 'dm'}"
    elif isinstance(event, DeadLettersReplayed):
        yield f"actor={shown_text(event.actor)}"
        yield f"replayed={len(event.replayed)}"
        yield f"failed={event.failed}"
    elif isinstance(event, DeadLettersPurged):
        yield f"actor={shown_text(event.actor)}"
        yield f"removed={event.removed}"


def compact_json_line(body: bytes) -> str | None:
    try:
        # Re-encoded compactly: one event, one line, whatever the producer's formatting.
        return orjson.dumps(orjson.loads(body)).decode()
    except orjson.JSONDecodeError:
        return None
