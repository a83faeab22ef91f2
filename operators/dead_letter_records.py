"""What a dead letter is, read from the message the dead-letter queue holds.

Two kinds of message land in `<prefix>.tool_calls.dead`, both with their original body, routing
key and properties: those the worker dead-letters carry `x-ltm-error` and `x-ltm-failed-at`;
those the broker dead-letters (at the work queue's delivery limit) carry `x-death` instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import orjson
from aio_pika.abc import AbstractIncomingMessage

from contracts import Topology, worker_queue_arguments
from contracts.dead_letters import ATTEMPTS_HEADER, ERROR_HEADER, FAILED_AT_HEADER

__all__ = [
    "DeadLetter",
    "DeadLetterSource",
    "HeldDeadLetter",
    "death_entry",
    "describe",
    "original_routing_key",
]

DeadLetterSource = Literal["worker", "broker"]


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One dead-lettered message, as the tools show it."""

    event_id: str | None
    tool_call_id: str | None
    routing_key: str
    source: DeadLetterSource
    reason: str
    failed_at: datetime | None
    attempts: int | None


@dataclass(frozen=True, slots=True)
class HeldDeadLetter:
    """A dead letter with its body, as the broker holds it (for a person to read)."""

    entry: DeadLetter
    body: bytes
    content_type: str | None


def describe(message: AbstractIncomingMessage, topology: Topology) -> DeadLetter:
    headers = message.headers or {}
    body = _body_fields(message.body)
    death = death_entry(headers, topology)
    # The worker's own reason wins: its copy keeps whatever headers the delivery had.
    if death is None or ERROR_HEADER in headers:
        source: DeadLetterSource = "worker"
        reason = str(headers.get(ERROR_HEADER) or "unknown (no x-ltm-error header)")
        failed_at = _parse_time(headers.get(FAILED_AT_HEADER))
        attempts = _worker_attempts(message, headers)
    else:
        source = "broker"
        reason = f"{death.get('reason', 'unknown')} (queue {death.get('queue', '?')})"
        failed_at = _parse_time(death.get("time"))
        attempts = _broker_attempts(death, topology)
    return DeadLetter(
        event_id=message.message_id or _text(body.get("event_id")),
        tool_call_id=message.correlation_id or _text(body.get("tool_call_id")),
        routing_key=original_routing_key(message, topology),
        source=source,
        reason=reason,
        failed_at=failed_at,
        attempts=attempts,
    )


def original_routing_key(message: AbstractIncomingMessage, topology: Topology) -> str:
    """The key it was first published with: the broker keeps it in `x-death`; the worker
    dead-letters with the delivery's own routing key."""
    death = death_entry(message.headers or {}, topology)
    if death is not None:
        keys = death.get("routing-keys")
        if isinstance(keys, Sequence) and keys and isinstance(keys[0], str):
            return keys[0]
    return message.routing_key or ""


def death_entry(headers: Mapping[str, Any], topology: Topology) -> Mapping[str, Any] | None:
    """The x-death entry of the work queue, else the most recent one."""
    deaths = headers.get("x-death")
    if not isinstance(deaths, Sequence) or isinstance(deaths, str | bytes) or not deaths:
        return None
    entries = [entry for entry in deaths if isinstance(entry, Mapping)]
    for entry in entries:
        if entry.get("queue") == topology.worker_queue:
            return entry
    return entries[0] if entries else None


def _broker_attempts(death: Mapping[str, Any], topology: Topology) -> int | None:
    count = death.get("count")
    if not isinstance(count, int):
        return None
    if death.get("reason") == "delivery_limit" and death.get("queue") == topology.worker_queue:
        # Each such death is the limit's worth of redeliveries plus the first delivery.
        return count * (int(worker_queue_arguments(topology)["x-delivery-limit"]) + 1)
    return count


def _worker_attempts(message: AbstractIncomingMessage, headers: Mapping[str, Any]) -> int | None:
    attempts = headers.get(ATTEMPTS_HEADER)
    if isinstance(attempts, int):
        return attempts
    # The worker copies the work queue's x-delivery-count; once the dead-letter queue itself
    # has redelivered the message (a listing returns it), that header is the DLQ's own count.
    count = headers.get("x-delivery-count")
    if isinstance(count, int) and not message.redelivered:
        return count + 1
    return None


def _body_fields(body: bytes) -> dict[str, Any]:
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _parse_time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return None
