"""The events a change sends, as the core queues them and as the outbox holds them: one call's
result, and the events of a change of a memory (`change_events`).

An event goes out in the transaction of the change that made it (the outbox), published
after the commit. A row keeps the trace context of the call that made it (`traceparent`,
while tracing is on), so that its publish, however late, belongs to that call's trace.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from contracts import (
    CacheInvalidate,
    EmbedRequested,
    Event,
    MemoryChanged,
    ToolCallCompleted,
    audit_routing_key,
    cache_routing_key,
    embed_routing_key,
    result_routing_key,
)

__all__ = [
    "UNTRACED",
    "OutboxRow",
    "OutgoingEvent",
    "Traceparents",
    "change_events",
    "outbox_rows",
    "result_event",
    "traceparent_of",
]


@dataclass(frozen=True, slots=True)
class OutgoingEvent:
    """An event to queue in the outbox, with where it goes and how long it is worth sending."""

    event: Event
    routing_key: str
    ttl_ms: int | None = None


def result_event(result: ToolCallCompleted, reply_ttl_ms: int) -> OutgoingEvent:
    """A call's result, to its shard: worth sending only while the bot may still wait for it."""
    return OutgoingEvent(result, result_routing_key(result.shard_id), reply_ttl_ms)


def change_events(
    change: MemoryChanged,
    *,
    server_disc_id: str | None,
    answered: tuple[ToolCallCompleted, EmbedRequested] | None = None,
    reply_ttl_ms: int | None = None,
) -> list[OutgoingEvent]:
    """The events of a change of a memory: `change` is its `memory.*` audit event.

    A tool call's change (`answered`: its result and the embed its channel is shown) sends the
    result, the embed, the cache invalidation, then the audit event; an operator's (a restore)
    the audit event, then the invalidation. The invalidation goes to the cache the memory lives
    in: its owner's for a personal memory, else the persona state of the server
    (`server_disc_id`); none when that key is unknown.
    """
    audit = OutgoingEvent(change, audit_routing_key(change.event_type.split(".")[1], change.scope))
    personal = change.scope == "target_user"
    key = change.owner_id if personal else server_disc_id
    invalidations: list[OutgoingEvent] = []
    if key is not None:
        invalidation = CacheInvalidate(
            causation_id=change.causation_id,
            cache="user" if personal else "persona_state",
            key=key,
            tool_call_id=change.tool_call_id,
        )
        invalidations.append(
            OutgoingEvent(invalidation, cache_routing_key(invalidation.cache, invalidation.key))
        )
    if answered is None:
        return [audit, *invalidations]
    result, embed = answered
    assert reply_ttl_ms is not None  # a call's result and embed expire with the reply
    return [
        result_event(result, reply_ttl_ms),
        OutgoingEvent(embed, embed_routing_key(embed.shard_id), reply_ttl_ms),
        *invalidations,
        audit,
    ]


@dataclass(frozen=True, slots=True)
class OutboxRow:
    """An event as the outbox holds it; the event id is its key (message_id on the wire)."""

    event_id: uuid.UUID
    event_type: str
    routing_key: str
    correlation_id: str | None
    body: bytes
    ttl_ms: int | None
    # W3C trace context of the call the event belongs to (None: written with tracing off).
    traceparent: str | None = None


# Trace contexts by tool_call_id (the events' correlation_id): none while tracing is off.
Traceparents = Mapping[str, str]
UNTRACED: Final[Traceparents] = {}


def traceparent_of(traceparents: Traceparents, event: Event) -> str | None:
    """The trace context of the call `event` belongs to, if it is traced."""
    correlation_id = event.correlation_id
    return None if correlation_id is None else traceparents.get(correlation_id)


def outbox_rows(
    events: Sequence[OutgoingEvent],
    bodies: Sequence[bytes],
    traceparents: Traceparents = UNTRACED,
) -> list[OutboxRow]:
    """The queued events as rows to publish: nothing the insert makes is needed for that."""
    return [
        OutboxRow(
            event_id=outgoing.event.event_id,
            event_type=outgoing.event.event_type,
            routing_key=outgoing.routing_key,
            correlation_id=outgoing.event.correlation_id,
            body=body,
            ttl_ms=outgoing.ttl_ms,
            traceparent=traceparent_of(traceparents, outgoing.event),
        )
        for outgoing, body in zip(events, bodies, strict=True)
    ]
