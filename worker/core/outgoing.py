"""The events a change sends, as the core queues them and as the outbox holds them.

An event goes out in the transaction of the change that made it (the outbox), published
after the commit. A row keeps the trace context of the call that made it (`traceparent`,
while tracing is on), so that its publish, however late, belongs to that call's trace.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from contracts import Event

__all__ = [
    "UNTRACED",
    "OutboxRow",
    "OutgoingEvent",
    "Traceparents",
    "outbox_rows",
    "traceparent_of",
]


@dataclass(frozen=True, slots=True)
class OutgoingEvent:
    """An event to queue in the outbox, with where it goes and how long it is worth sending."""

    event: Event
    routing_key: str
    ttl_ms: int | None = None


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
