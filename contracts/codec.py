"""Bytes on the wire: one JSON encoding per event, and the AMQP properties it travels with."""

from __future__ import annotations

import itertools
import json
import re
from datetime import UTC
from typing import Any, Final

from pydantic import TypeAdapter, ValidationError

from contracts.audit import MemoryCreated, MemoryDeleted, MemoryRestored, MemoryUpdated
from contracts.cache import CacheInvalidate
from contracts.data_requests import (
    DataRequestCompleted,
    DataRequestRequested,
    NoticeRetract,
    SubjectErased,
    SubjectExported,
)
from contracts.embeds import EmbedRequested
from contracts.envelope import SCHEMA_VERSION, Event
from contracts.operator import DeadLettersPurged, DeadLettersReplayed, MemoriesReverted
from contracts.results import ToolCallCompleted
from contracts.tool_calls import ToolCallRequested

__all__ = [
    "CONTENT_TYPE",
    "EVENT_TYPES",
    "MAX_NESTING",
    "REPLAYED_HEADER",
    "InvalidEnvelope",
    "amqp_properties",
    "decode_event",
    "decode_superseded_event",
    "decode_tool_call",
    "encode_event",
    "nesting_depth",
    "schema_version_of",
]

CONTENT_TYPE: Final = "application/json"
# A header of a `tool_call.completed` repeated from the idempotency record (true): the call was
# answered before and nothing changed now. Absent from a first answer.
REPLAYED_HEADER: Final = "x-ltm-replayed"

# Arrays and objects nested deeper than this make a body invalid, before it is parsed.
MAX_NESTING: Final = 64
_JSON_STRING: Final = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_A_BRACKET: Final = bytes(b for b in range(256) if b not in b"[]{}")
# +1 for an opening bracket, -1 for a closing one, indexed by the byte.
_STEP: Final = tuple(1 if b in b"[{" else -1 for b in range(256))

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
        MemoriesReverted,
        DataRequestRequested,
        DataRequestCompleted,
        SubjectExported,
        SubjectErased,
        NoticeRetract,
    )
}

_ENVELOPE_PEEK: Final = TypeAdapter(dict[str, Any])


def schema_version_of(event_type: str) -> int:
    """The version a body of `event_type` is at (the AMQP header and the body field): each
    event type has its own; `memory.*` is at 2, every other type at 1."""
    model = EVENT_TYPES.get(event_type)
    return SCHEMA_VERSION if model is None else model.SCHEMA_VERSION


class InvalidEnvelope(ValueError):
    """The bytes are not a message of this contract; the reason is safe to log and to store."""


def encode_event(event: Event) -> bytes:
    return event.model_dump_json().encode()


def nesting_depth(body: bytes) -> int:
    """How deep arrays and objects nest in a JSON text, brackets inside strings aside, counted
    without parsing it (and in C: a wide body of many brackets costs no Python loop)."""
    brackets = _JSON_STRING.sub(b"", body).translate(None, _NOT_A_BRACKET)
    return max(itertools.accumulate(map(_STEP.__getitem__, brackets)), default=0)


def _check_nesting(body: bytes) -> None:
    if body.count(b"[") + body.count(b"{") <= MAX_NESTING:
        return  # too few brackets to nest that deep: the usual call, no scan
    depth = nesting_depth(body)
    if depth > MAX_NESTING:
        raise InvalidEnvelope(f"JSON nested {depth} levels deep, more than {MAX_NESTING}")


def decode_event(body: bytes) -> Event:
    """Reads any event of this contract, chosen by its `event_type`."""
    _check_nesting(body)
    try:
        peek = _ENVELOPE_PEEK.validate_json(body)
    except ValidationError as error:
        raise InvalidEnvelope(f"body is not a JSON object: {_first_error(error)}") from None
    model = EVENT_TYPES.get(str(peek.get("event_type")))
    version = peek.get("schema_version")
    if version is None:
        raise InvalidEnvelope(
            "not an event envelope: the JSON object has no schema_version "
            "(nor, most likely, the event_type, event_id and the rest)"
        )
    if model is None:
        if version != SCHEMA_VERSION or isinstance(version, bool):
            raise InvalidEnvelope(
                f"unsupported schema_version {version!r} (this service reads {SCHEMA_VERSION})"
            )
        raise InvalidEnvelope(f"unknown event_type {peek.get('event_type')!r}")
    if version != model.SCHEMA_VERSION or isinstance(version, bool):
        # A `memory.*` body of version 1 (with texts) read from a stream written before the
        # upgrade is refused here too: readers of the stream decide what to do with it.
        raise InvalidEnvelope(
            f"unsupported schema_version {version!r} for {model.EVENT_TYPE}"
            f" (at {model.SCHEMA_VERSION})"
        )
    try:
        return model.model_validate_json(body)
    except ValidationError as error:
        raise InvalidEnvelope(f"invalid {model.EVENT_TYPE}: {_first_error(error)}") from None


# Event types whose version 1 carried fields the current version dropped, and those fields:
# a body of version 1 is read as the current event, without them.
_DROPPED_SINCE_VERSION_1: Final = {
    event_type: ("content_before", "content_after")
    for event_type in (
        MemoryCreated.EVENT_TYPE,
        MemoryUpdated.EVENT_TYPE,
        MemoryDeleted.EVENT_TYPE,
        MemoryRestored.EVENT_TYPE,
    )
}


def decode_superseded_event(body: bytes) -> Event:
    """A body of an older version of its event type, read as the current version: a `memory.*`
    body of schema_version 1 (written before the upgrade, with the memory's texts), read as
    its version-2 event, the texts dropped unread. For readers of a stream that may still hold
    such bodies (`ltm audit tail`, the console); `decode_event` refuses them.

    Raises `InvalidEnvelope` for a body that is not such an event.
    """
    _check_nesting(body)
    try:
        peek = _ENVELOPE_PEEK.validate_json(body)
    except ValidationError as error:
        raise InvalidEnvelope(f"body is not a JSON object: {_first_error(error)}") from None
    event_type = str(peek.get("event_type"))
    version = peek.get("schema_version")
    dropped = _DROPPED_SINCE_VERSION_1.get(event_type)
    if dropped is None or version != 1 or isinstance(version, bool):
        raise InvalidEnvelope(f"not a superseded event: {event_type} at {version!r}")
    model = EVENT_TYPES[event_type]
    current = {name: value for name, value in peek.items() if name not in dropped}
    current["schema_version"] = model.SCHEMA_VERSION
    try:
        return model.model_validate_json(json.dumps(current))
    except ValidationError as error:
        raise InvalidEnvelope(f"invalid {event_type}: {_first_error(error)}") from None


def decode_tool_call(body: bytes) -> ToolCallRequested:
    # One parse on the hot path; the slower diagnosis runs only for a bad body.
    _check_nesting(body)
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
