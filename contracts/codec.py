"""Bytes on the wire: one JSON encoding per event, and the AMQP properties it travels with."""

from __future__ import annotations

from datetime import UTC
from typing import Any, Final

from pydantic import TypeAdapter, ValidationError

from contracts.audit import MemoryCreated, MemoryDeleted, MemoryRestored, MemoryUpdated
from contracts.cache import CacheInvalidate
from contracts.embeds import EmbedRequested
from contracts.envelope import SCHEMA_VERSION, Event
from contracts.operator import DeadLettersPurged, DeadLettersReplayed
from contracts.results import ToolCallCompleted
from contracts.tool_calls import ToolCallRequested

__all__ = [
    "CONTENT_TYPE",
    "EVENT_TYPES",
    "REPLAYED_HEADER",
    "InvalidEnvelope",
    "amqp_properties",
    "decode_event",
    "decode_tool_call",
    "encode_event",
]

CONTENT_TYPE: Final = "application/json"
# A header of a `tool_call.completed` repeated from the idempotency record (true): the call was
# answered before and nothing changed now. Absent from a first answer.
REPLAYED_HEADER: Final = "x-ltm-replayed"

EVENT_TYPES: Final[dict[str, type[Event]]] = {
    model.EVENT_TYPE: model
    for model in (
        ToolCallRequested,
        ToolCallCompleted,
        EmbedRequested,
        CacheInvalidate,
        MemoryCreated,
        MemoryUpdated,
        MemoryDeleted,
        MemoryRestored,
        DeadLettersReplayed,
        DeadLettersPurged,
    )
}

_ENVELOPE_PEEK: Final = TypeAdapter(dict[str, Any])


class InvalidEnvelope(ValueError):
    """The bytes are not a message of this contract; the reason is safe to log and to store."""


def encode_event(event: Event) -> bytes:
    return event.model_dump_json().encode()


def decode_event(body: bytes) -> Event:
    """Reads any event of this contract, chosen by its `event_type`."""
    try:
        peek = _ENVELOPE_PEEK.validate_json(body)
    except ValidationError as error:
        raise InvalidEnvelope(f"body is not a JSON object: {_first_error(error)}") from None
    version = peek.get("schema_version")
    if version != SCHEMA_VERSION or isinstance(version, bool):
        raise InvalidEnvelope(f"unsupported schema_version {version!r}")
    model = EVENT_TYPES.get(str(peek.get("event_type")))
    if model is None:
        raise InvalidEnvelope(f"unknown event_type {peek.get('event_type')!r}")
    try:
        return model.model_validate_json(body)
    except ValidationError as error:
        raise InvalidEnvelope(f"invalid {model.EVENT_TYPE}: {_first_error(error)}") from None


def decode_tool_call(body: bytes) -> ToolCallRequested:
    # One parse on the hot path; the slower diagnosis runs only for a bad body.
    try:
        return ToolCallRequested.model_validate_json(body)
    except ValidationError:
        event = decode_event(body)
    raise InvalidEnvelope(f"expected tool_call.requested, got {event.event_type}")


def amqp_properties(event: Event) -> dict[str, Any]:
    """The AMQP basic properties every message carries (docs/contract.md), as plain values."""
    return {
        "content_type": CONTENT_TYPE,
        "delivery_mode": 2,
        "message_id": str(event.event_id),
        "correlation_id": event.correlation_id,
        "type": event.event_type,
        "timestamp": event.occurred_at.astimezone(UTC),
        "headers": {"schema_version": event.schema_version},
    }


def _first_error(error: ValidationError) -> str:
    errors = error.errors(include_url=False, include_input=False)
    if not errors:
        return str(error)
    first = errors[0]
    location = ".".join(str(part) for part in first["loc"]) or "body"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{location}: {first['msg']}{more}"
