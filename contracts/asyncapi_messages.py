"""The AsyncAPI document's messages and their payload schemas (from the pydantic models)."""

from __future__ import annotations

from typing import Any, Final

from contracts.asyncapi_parts import AMQP_BINDING_VERSION, MESSAGE_NAMES, SCHEMAS, ref
from contracts.audit import MemoryCreated, MemoryDeleted, MemoryRestored, MemoryUpdated
from contracts.cache import CacheInvalidate
from contracts.codec import CONTENT_TYPE, EVENT_TYPES, REPLAYED_HEADER
from contracts.dead_letters import (
    ATTEMPTS_HEADER,
    ERROR_HEADER,
    FAILED_AT_HEADER,
    ORIGINAL_USER_ID_HEADER,
    REASONS,
)
from contracts.embeds import EmbedRequested
from contracts.envelope import SCHEMA_VERSION, Event
from contracts.operator import DeadLettersPurged, DeadLettersReplayed
from contracts.results import ToolCallCompleted
from contracts.tool_calls import ToolCallRequested

__all__ = ["messages", "schemas"]

_SUMMARIES: Final[dict[type[Event], str]] = {
    ToolCallRequested: "A bot shard asks the worker to run one LLM tool call.",
    ToolCallCompleted: "The worker's answer to one tool call, routed to the shard that asked.",
    EmbedRequested: "A notice the shard posts in the channel after a committed change.",
    CacheInvalidate: "Every gateway process drops one cache entry.",
    MemoryCreated: "Audit: a memory was saved by the create tool.",
    MemoryUpdated: "Audit: a memory's content was replaced.",
    MemoryDeleted: "Audit: a memory was deleted.",
    MemoryRestored: "Audit: a memory was put back as it was before a revision.",
    DeadLettersReplayed: "Audit: an operator sent dead-lettered tool calls back to the worker.",
    DeadLettersPurged: "Audit: an operator emptied the dead-letter queue.",
}


_EXTRA_HEADERS: Final[dict[type[Event], dict[str, Any]]] = {
    ToolCallCompleted: {
        REPLAYED_HEADER: {
            "type": "boolean",
            "const": True,
            "description": (
                "Present on an answer repeated from the idempotency record: the call was "
                "answered before, and nothing changed now. Absent from a first answer."
            ),
        }
    }
}


def _headers(
    extra: dict[str, Any] | None = None, *, required: tuple[str, ...] = ("schema_version",)
) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "schema_version": {"type": "integer", "const": SCHEMA_VERSION},
    }
    properties.update(extra or {})
    headers: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        headers["required"] = list(required)
    return headers


def _message(model: type[Event]) -> dict[str, Any]:
    name = MESSAGE_NAMES[model]
    about_a_call = "tool_call_id" in model.model_fields
    properties: dict[str, Any] = {"message_id": "event_id"}
    if about_a_call:
        properties["correlation_id"] = "tool_call_id"
    properties |= {
        "type": model.EVENT_TYPE,
        "content_type": CONTENT_TYPE,
        "delivery_mode": 2,
        "timestamp": "occurred_at",
    }
    if model is ToolCallRequested:
        # The broker refuses a user_id other than the publishing connection's user.
        properties["user_id"] = "the publisher's broker user (checked by LTM_TRUSTED_PUBLISHERS)"
    message: dict[str, Any] = {
        "name": model.EVENT_TYPE,
        "title": name,
        "summary": _SUMMARIES[model],
        "contentType": CONTENT_TYPE,
        "headers": _headers(_EXTRA_HEADERS.get(model)),
        "payload": ref(SCHEMAS + name),
        "bindings": {
            "amqp": {"messageType": model.EVENT_TYPE, "bindingVersion": AMQP_BINDING_VERSION}
        },
        # Which AMQP basic property carries what (docs/contract.md, "Identifiers and encoding").
        "x-amqp-properties": properties,
    }
    if about_a_call:
        message["correlationId"] = {
            "description": "AMQP correlation_id: the tool call's id.",
            "location": "$message.payload#/tool_call_id",
        }
    return message


def _dead_lettered_message() -> dict[str, Any]:
    dead = _message(ToolCallRequested)
    reasons = "\n".join(f"- `{reason}`: {meaning}" for reason, meaning in REASONS.items())
    dead.update(
        name="tool_call.requested (dead-lettered)",
        title="DeadLetteredToolCall",
        summary="A tool call as it arrived, marked with why it was given up on.",
        description=(
            "The body is the one that arrived, byte for byte: usually a tool_call.requested, "
            "but it may be anything the worker could not take (not JSON, too large, an invalid "
            "envelope), so its payload schema constrains nothing. The routing key and the "
            "properties are the original ones, except `user_id`: a copy the worker "
            f"dead-letters goes out under the worker's own user, the original in "
            f"`{ORIGINAL_USER_ID_HEADER}`.\n"
            f"`{ERROR_HEADER}` begins with one of:\n{reasons}\n"
        ),
        payload={
            "description": "The original body, unparsed (see the message's description).",
        },
        headers=_headers(
            _dead_letter_headers(),
            # A body that is not a tool call may have come without the header.
            required=(),
        ),
    )
    return dead


def _dead_letter_headers() -> dict[str, Any]:
    """The headers a dead-lettered call may carry: the worker's, then the broker's."""
    return {
        ERROR_HEADER: {
            "type": "string",
            "maxLength": 1000,
            "description": "Why the worker gave up: one of the reasons above, then "
            "`: ` and the details. Absent when the broker dead-lettered the call.",
        },
        FAILED_AT_HEADER: {
            "type": "string",
            "format": "date-time",
            "description": "When the worker gave up (RFC 3339, UTC).",
        },
        ATTEMPTS_HEADER: {
            "type": "integer",
            "minimum": 1,
            "description": "Deliveries of the call before the worker gave up on it, "
            "that one included.",
        },
        ORIGINAL_USER_ID_HEADER: {
            "type": "string",
            "description": "The broker user the call was first published as (its "
            "AMQP user_id): set by the worker on its dead-letter copy, and by "
            "`ltm dlq replay`, which republishes under the operator's own user.",
        },
        "x-delivery-count": {
            "type": "integer",
            "description": "Set by quorum queues: earlier deliveries of the message.",
        },
        "x-death": {
            "type": "array",
            "description": "Added by the broker when it dead-letters at the limit.",
            "items": {
                "type": "object",
                "properties": {
                    "reason": {"type": "string", "examples": ["delivery_limit"]},
                    "count": {"type": "integer"},
                    "queue": {"type": "string"},
                    "exchange": {"type": "string"},
                    "routing-keys": {"type": "array", "items": {"type": "string"}},
                    "time": {"description": "AMQP timestamp"},
                },
            },
        },
        "x-first-death-reason": {"type": "string", "description": "Set by the broker."},
        "x-first-death-queue": {"type": "string", "description": "Set by the broker."},
        "x-first-death-exchange": {
            "type": "string",
            "description": "Set by the broker.",
        },
    }


def messages() -> dict[str, Any]:
    messages = {MESSAGE_NAMES[model]: _message(model) for model in EVENT_TYPES.values()}
    messages["DeadLetteredToolCall"] = _dead_lettered_message()
    return messages


def schemas() -> dict[str, Any]:
    schemas: dict[str, Any] = {}
    for model in EVENT_TYPES.values():
        schema = model.model_json_schema(ref_template=SCHEMAS + "{model}")
        for name, definition in schema.pop("$defs", {}).items():
            schemas.setdefault(name, definition)
        schemas[MESSAGE_NAMES[model]] = schema
    return dict(sorted(schemas.items()))
