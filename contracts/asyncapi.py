"""docs/contract.md as an AsyncAPI 3.0 document: every channel, message and operation.

Schemas come from the pydantic models, so the document cannot drift from the code;
`make asyncapi` writes it to `contracts/asyncapi.yaml`, and a test fails when the committed
file differs. PyYAML is imported only to render (the `asyncapi` extra): bot shards import
`contracts` with pydantic alone.
"""

from __future__ import annotations

import sys
from typing import Any, Final

from contracts.audit import MemoryCreated, MemoryDeleted, MemoryRestored, MemoryUpdated
from contracts.cache import CacheInvalidate
from contracts.codec import CONTENT_TYPE, EVENT_TYPES, MAX_NESTING, REPLAYED_HEADER
from contracts.data_requests import (
    DATA_REQUEST_ROUTING_KEY,
    DataRequestCompleted,
    DataRequestRequested,
    NoticeRetract,
    SubjectErased,
    SubjectExported,
    retract_routing_key,
)
from contracts.dead_letters import (
    ATTEMPTS_HEADER,
    ERROR_HEADER,
    FAILED_AT_HEADER,
    ORIGINAL_USER_ID_HEADER,
    REASONS,
)
from contracts.embeds import EmbedRequested
from contracts.envelope import SCHEMA_VERSION, Event
from contracts.operator import (
    MEMORIES_REVERTED_ROUTING_KEY,
    DeadLettersPurged,
    DeadLettersReplayed,
    MemoriesReverted,
    operator_routing_key,
)
from contracts.results import ToolCallCompleted
from contracts.tool_calls import TOOL_NAMES, ToolCallRequested
from contracts.topology import (
    AUDIT_BINDING_KEYS,
    DEFAULT_PREFIX,
    Topology,
    audit_routing_key,
    audit_stream_arguments,
    cache_routing_key,
    dead_letter_queue_arguments,
    shard_queue_arguments,
    worker_queue_arguments,
)

__all__ = ["ASYNCAPI_VERSION", "build_document", "main", "render_yaml"]

ASYNCAPI_VERSION: Final = "3.0.0"
DOCUMENT_VERSION: Final = f"{SCHEMA_VERSION}.0.0"
AMQP_BINDING_VERSION: Final = "0.3.0"
REPLY_TTL_MS: Final = 900_000  # LTM_REPLY_TTL_S's default

SCHEMAS: Final = "#/components/schemas/"
MESSAGES: Final = "#/components/messages/"

# The message each event type is known by in the document: its model's name, in the codec's order.
MESSAGE_NAMES: Final[dict[type[Event], str]] = {
    model: model.__name__ for model in EVENT_TYPES.values()
}
AUDIT_MODELS: Final = (MemoryCreated, MemoryUpdated, MemoryDeleted, MemoryRestored)
OPERATOR_MODELS: Final = (DeadLettersReplayed, DeadLettersPurged)
SUBJECT_MODELS: Final = (SubjectExported, SubjectErased)
# What the audit stream keeps (`AUDIT_BINDING_KEYS`): changes, operators' acts, data requests
# answered; none holds a text.
AUDITED_MODELS: Final = (*AUDIT_MODELS, *OPERATOR_MODELS, *SUBJECT_MODELS)
DEAD_LETTERED: Final = "DeadLetteredToolCall"


def build_document(prefix: str = DEFAULT_PREFIX) -> dict[str, Any]:
    """The AsyncAPI document as plain data, names under `prefix`."""
    messages = {MESSAGE_NAMES[model]: _message(model) for model in EVENT_TYPES.values()}
    messages[DEAD_LETTERED] = _dead_lettered_message()
    return {
        "asyncapi": ASYNCAPI_VERSION,
        "info": _info(),
        "defaultContentType": CONTENT_TYPE,
        "servers": {
            "broker": {
                "host": "localhost:5672",
                "protocol": "amqp",
                "protocolVersion": "0.9.1",
                "description": "RabbitMQ (LTM_AMQP_URL); quorum and stream queues need 3.9+.",
            }
        },
        "channels": _channels(Topology(prefix)),
        "operations": _operations(),
        "components": {"messages": messages, "schemas": _schemas()},
    }


def render_yaml(prefix: str = DEFAULT_PREFIX) -> str:
    """The document as `contracts/asyncapi.yaml` holds it; needs PyYAML (the `asyncapi` extra)."""
    try:
        import yaml
    except ImportError as missing:
        raise ImportError(
            "rendering the AsyncAPI document needs PyYAML: "
            "pip install 'tomori-ltm-contracts[asyncapi]'"
        ) from missing

    class _Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True  # shared sub-objects written out in full: no &id001 anchors

    # Long descriptions stay readable; key order stays as built.
    _Dumper.add_representer(str, _represent_text)
    rendered: str = yaml.dump(
        build_document(prefix),
        Dumper=_Dumper,
        sort_keys=False,
        allow_unicode=True,
        width=100,
    )
    return rendered


def main() -> int:
    sys.stdout.write(render_yaml())
    return 0


def _represent_text(dumper: Any, text: str) -> Any:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


def _ref(target: str) -> dict[str, str]:
    return {"$ref": target}


def _messages_of(*models: type[Event]) -> dict[str, dict[str, str]]:
    return {MESSAGE_NAMES[model]: _ref(MESSAGES + MESSAGE_NAMES[model]) for model in models}


def _info() -> dict[str, Any]:
    return {
        "title": "Long-term-memory update service",
        "version": DOCUMENT_VERSION,
        "description": (
            "Messages between bot shards, the worker, gateway processes and operators' tools.\n"
            f"Names are shown under the default prefix `{DEFAULT_PREFIX}` (setting "
            "LTM_AMQP_PREFIX).\n"
            "Every message is persistent (delivery_mode 2), UTF-8 JSON (content_type "
            f"{CONTENT_TYPE}), and carries the AMQP properties message_id = event_id, "
            "correlation_id = tool_call_id where there is one, type = event_type, timestamp, "
            "and the header schema_version, the event type's own (the body's schema_version): "
            f"2 for memory.* (no texts: revision_id names the revision that holds them), "
            f"{SCHEMA_VERSION} for every other type.\n"
            "Consumers deduplicate on event_id. Ids of Discord objects are strings of digits.\n"
            "A tool call's body holds at most LTM_MAX_MESSAGE_BYTES (262144 by default) and "
            f"nests at most {MAX_NESTING} levels; the worker dead-letters one that does not, "
            "unparsed.\n"
        ),
    }


# -- channels: the exchanges' routing keys, then the queues -----------------------------------

_SHARD: Final = {"shardId": {"description": "The bot shard's number (context.shard_id), >= 0."}}
_TOOL_NAME: Final = {"toolName": {"enum": list(TOOL_NAMES), "description": "The tool's name."}}
_DEAD_LETTERS: Final = {DEAD_LETTERED: _ref(MESSAGES + DEAD_LETTERED)}


def _channels(topology: Topology) -> dict[str, Any]:
    """Every channel, in the document's order: routing keys first, then queues."""
    events = topology.events_exchange
    return {
        "toolCallRequested": _routing_key_channel(
            topology.tool_calls_exchange,
            "{toolName}",
            "Tool calls, routed by tool name (`remember_this_fact` is the old name of "
            "`create_long_term_memory`).",
            _messages_of(ToolCallRequested),
            _TOOL_NAME,
        ),
        "dataRequestRequested": _routing_key_channel(
            topology.tool_calls_exchange,
            DATA_REQUEST_ROUTING_KEY,
            "Data requests (export or erase a person's or a server's data), to the worker's "
            "queue; retried and dead-lettered as tool calls are.",
            _messages_of(DataRequestRequested),
            {},
        ),
        "toolCallCompleted": _routing_key_channel(
            events,
            "result.shard.{shardId}",
            "The result of a tool call, or the answer to a data request, for the shard that "
            "published it (a request's context.shard_id).",
            _messages_of(ToolCallCompleted, DataRequestCompleted),
            _SHARD,
        ),
        "embedRequested": _routing_key_channel(
            events,
            "embed.shard.{shardId}",
            "Embeds to post, for the shard that published the call.",
            _messages_of(EmbedRequested),
            _SHARD,
        ),
        "cacheInvalidate": _routing_key_channel(
            events,
            cache_routing_key("{cache}", "{key}"),
            "Cache invalidations, for every gateway process.",
            _messages_of(CacheInvalidate),
            {
                "cache": {"enum": ["persona_state", "user"], "description": "Which cache."},
                "key": {"description": "Guild id (user id in a DM), or a user's Discord id."},
            },
        ),
        "noticeRetract": _routing_key_channel(
            events,
            retract_routing_key(0).rpartition(".")[0] + ".{shardId}",
            "A notice about an erased memory to delete, for the shard whose gateway posted it.",
            _messages_of(NoticeRetract),
            _SHARD,
        ),
        "memoryChanged": _routing_key_channel(
            events,
            audit_routing_key("{action}", "{scope}"),
            "The audit trail of every change, without its texts (revision_id names the "
            "memory_revisions row that holds them).",
            _messages_of(*AUDIT_MODELS),
            {
                "action": {"enum": ["created", "updated", "deleted", "restored"]},
                "scope": {"enum": ["server_wide", "target_user"]},
            },
        ),
        "operatorAction": _routing_key_channel(
            events,
            operator_routing_key("{action}"),
            "What an operator did by hand to the dead letters (the console).",
            _messages_of(*OPERATOR_MODELS),
            {"action": {"enum": [model.ACTION for model in OPERATOR_MODELS]}},
        ),
        "memoriesReverted": _routing_key_channel(
            events,
            MEMORIES_REVERTED_ROUTING_KEY,
            "An operator's revert of the memories some revisions changed (`ltm memory revert`, "
            "the console): why, by which filter, how many.",
            _messages_of(MemoriesReverted),
            {},
        ),
        "subjectChanged": _routing_key_channel(
            events,
            # The helper's form with parameters (it takes only the real values).
            "subject.{action}.{subjectKind}",
            "The audit record of a data request answered: an export or an erasure (no text).",
            _messages_of(*SUBJECT_MODELS),
            {
                "action": {"enum": ["exported", "erased"]},
                "subjectKind": {"enum": ["user", "guild"]},
            },
        ),
        "deadLetter": _routing_key_channel(
            topology.dead_letter_exchange,
            "{toolName}",
            "Tool calls the worker gave up on, with their original routing key, body and "
            f"properties. The worker republishes them here with the headers {ERROR_HEADER}, "
            f"{FAILED_AT_HEADER}, {ATTEMPTS_HEADER} and {ORIGINAL_USER_ID_HEADER}; the "
            "broker dead-letters here at the work queue's delivery limit, adding x-death.",
            _DEAD_LETTERS,
            _TOOL_NAME,
        ),
        "workerQueue": _queue_channel(
            topology.worker_queue,
            "The worker's work queue. Every process declares it with exactly these arguments: "
            "a mismatch closes the channel.",
            _messages_of(ToolCallRequested, DataRequestRequested),
            arguments=worker_queue_arguments(topology),
            bound=[
                {"exchange": topology.tool_calls_exchange, "routingKey": name}
                for name in (*TOOL_NAMES, DATA_REQUEST_ROUTING_KEY)
            ],
        ),
        "deadLetterQueue": _queue_channel(
            topology.dead_letter_queue,
            "Dead-lettered tool calls, for `ltm dlq list|replay|purge`.",
            _DEAD_LETTERS,
            arguments=dead_letter_queue_arguments(),
            bound=[{"exchange": topology.dead_letter_exchange, "routingKey": "#"}],
        ),
        "shardQueue": _queue_channel(
            # The queue's name with the shard number as a parameter.
            topology.shard_queue(0).rpartition(".")[0] + ".{shardId}",
            "One bot shard's results, answers to data requests, embeds and retractions, "
            "consumed by the gateway process that owns it.",
            _messages_of(ToolCallCompleted, DataRequestCompleted, EmbedRequested, NoticeRetract),
            arguments=shard_queue_arguments(),
            bound=[
                {"exchange": events, "routingKey": "result.shard.{shardId}"},
                {"exchange": events, "routingKey": "embed.shard.{shardId}"},
                {"exchange": events, "routingKey": "retract.shard.{shardId}"},
            ],
            parameters=_SHARD,
        ),
        "cacheQueue": _queue_channel(
            topology.cache_queue("{instance}"),
            "One gateway process's cache invalidations; named by the process so that it can "
            "be declared again after a reconnect.",
            _messages_of(CacheInvalidate),
            arguments={},
            bound=[{"exchange": events, "routingKey": "cache.#"}],
            parameters={"instance": {"description": "The gateway process's own instance name."}},
            exclusive=True,
        ),
        "auditStream": _queue_channel(
            topology.audit_stream,
            "The audit trail, kept 30 days, readable from any offset (`ltm audit tail`): "
            "changes, operators' acts and data requests answered, never a text. Results, "
            "embeds, invalidations and retractions go to the shard and cache queues alone.",
            _messages_of(*AUDITED_MODELS),
            arguments=audit_stream_arguments(),
            bound=[{"exchange": events, "routingKey": key} for key in AUDIT_BINDING_KEYS],
        ),
    }


def _routing_key_channel(
    exchange: str,
    address: str,
    description: str,
    messages: dict[str, Any],
    parameters: dict[str, Any],
) -> dict[str, Any]:
    return {
        "address": address,
        "description": description,
        "messages": messages,
        "parameters": parameters,
        "bindings": {
            "amqp": {
                "is": "routingKey",
                "exchange": {
                    "name": exchange,
                    "type": "topic",
                    "durable": True,
                    "autoDelete": False,
                },
                "bindingVersion": AMQP_BINDING_VERSION,
            }
        },
    }


def _queue_channel(
    name: str,
    description: str,
    messages: dict[str, Any],
    *,
    arguments: dict[str, Any],
    bound: list[dict[str, str]],
    parameters: dict[str, Any] | None = None,
    exclusive: bool = False,
) -> dict[str, Any]:
    channel: dict[str, Any] = {
        "address": name,
        "description": description,
        "messages": messages,
    }
    if parameters:
        channel["parameters"] = parameters
    channel["bindings"] = {
        "amqp": {
            "is": "queue",
            "queue": {
                "name": name,
                "durable": not exclusive,
                "exclusive": exclusive,
                "autoDelete": exclusive,
            },
            "bindingVersion": AMQP_BINDING_VERSION,
        }
    }
    # The AMQP binding object has no place for these: specification extensions carry them.
    channel["x-amqp-queue-arguments"] = arguments
    channel["x-amqp-queue-bindings"] = bound
    return channel


# -- operations: who sends and who receives on each channel -----------------------------------

_PERSISTENT: Final = {"deliveryMode": 2, "timestamp": True}
_EXPIRING: Final = {**_PERSISTENT, "expiration": REPLY_TTL_MS}
_CONSUMING: Final = {"ack": True}


def _operations() -> dict[str, Any]:
    """Every operation, in the document's order."""
    audit = [MESSAGE_NAMES[model] for model in AUDIT_MODELS]
    operator = [MESSAGE_NAMES[model] for model in OPERATOR_MODELS]
    audited = [MESSAGE_NAMES[model] for model in AUDITED_MODELS]
    subject = [MESSAGE_NAMES[model] for model in SUBJECT_MODELS]
    return {
        "requestToolCall": _operation(
            "send",
            "toolCallRequested",
            ["ToolCallRequested"],
            "A bot shard publishes the LLM's tool call and waits for its result.",
            {**_PERSISTENT, "mandatory": True},
            reply={
                "channel": _ref("#/channels/toolCallCompleted"),
                "messages": [_ref("#/channels/toolCallCompleted/messages/ToolCallCompleted")],
            },
        ),
        "requestData": _operation(
            "send",
            "dataRequestRequested",
            ["DataRequestRequested"],
            "A bot (for the person who asked) or an operator's tool asks for an export or an "
            "erasure; the answer goes to the request's context.shard_id, if any.",
            {**_PERSISTENT, "mandatory": True},
            reply={
                "channel": _ref("#/channels/toolCallCompleted"),
                "messages": [_ref("#/channels/toolCallCompleted/messages/DataRequestCompleted")],
            },
        ),
        "consumeToolCalls": _operation(
            "receive",
            "workerQueue",
            ["ToolCallRequested", "DataRequestRequested"],
            "The worker runs each call once in effect (inbox on tool_call_id), and each data "
            "request once (on request_id), then acks.",
            _CONSUMING,
        ),
        "sendToolCallCompleted": _operation(
            "send",
            "toolCallCompleted",
            ["ToolCallCompleted"],
            "The worker answers; the message expires after LTM_REPLY_TTL_S.",
            _EXPIRING,
        ),
        "sendDataRequestCompleted": _operation(
            "send",
            "toolCallCompleted",
            ["DataRequestCompleted"],
            "The worker answers a data request to its context's shard.",
            _PERSISTENT,
        ),
        "sendEmbedRequested": _operation(
            "send",
            "embedRequested",
            ["EmbedRequested"],
            "After a committed change the worker asks the shard to post a notice.",
            _EXPIRING,
        ),
        "sendCacheInvalidate": _operation(
            "send",
            "cacheInvalidate",
            ["CacheInvalidate"],
            "After a change the worker tells every gateway process to drop a cache entry.",
            _PERSISTENT,
        ),
        "sendMemoryChanged": _operation(
            "send",
            "memoryChanged",
            audit,
            "The worker (and `ltm memory restore`) records every change.",
            _PERSISTENT,
        ),
        "sendNoticeRetract": _operation(
            "send",
            "noticeRetract",
            ["NoticeRetract"],
            "An erasure asks the shard that posted each notice of an erased memory to delete it.",
            _PERSISTENT,
        ),
        "sendOperatorAction": _operation(
            "send",
            "operatorAction",
            operator,
            "The operator console records each replay and purge, with the operator's name.",
            _PERSISTENT,
        ),
        "sendMemoriesReverted": _operation(
            "send",
            "memoriesReverted",
            ["MemoriesReverted"],
            "A revert records itself once, after the memory.restored events of its memories.",
            _PERSISTENT,
        ),
        "sendSubjectChanged": _operation(
            "send",
            "subjectChanged",
            subject,
            "The worker records each export and erasure it did (counts, never a text).",
            _PERSISTENT,
        ),
        "deadLetterToolCall": _operation(
            "send",
            "deadLetter",
            [DEAD_LETTERED],
            "The worker gives up on a call it cannot process, with the reason.",
            _PERSISTENT,
        ),
        "consumeShardQueue": _operation(
            "receive",
            "shardQueue",
            ["ToolCallCompleted", "DataRequestCompleted", "EmbedRequested", "NoticeRetract"],
            "The gateway wakes the waiting tool client or data-rights request, posts the embed, "
            "or deletes the notice.",
            _CONSUMING,
        ),
        "consumeCacheInvalidations": _operation(
            "receive",
            "cacheQueue",
            ["CacheInvalidate"],
            "Each gateway process drops the entry from its caches.",
            _CONSUMING,
        ),
        "tailAudit": _operation(
            "receive",
            "auditStream",
            audited,
            "Operators read the stream from an offset (x-stream-offset: first, last, a time); "
            "`ltm audit tail` and the console join each change's texts from its revision.",
            _CONSUMING,
        ),
        "inspectDeadLetters": _operation(
            "receive",
            "deadLetterQueue",
            [DEAD_LETTERED],
            "`ltm dlq list|replay|purge`; a replay republishes with the original routing key.",
            _CONSUMING,
        ),
    }


def _operation(
    action: str,
    channel: str,
    messages: list[str],
    description: str,
    binding: dict[str, Any],
    *,
    reply: dict[str, Any] | None = None,
) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "action": action,
        "channel": _ref(f"#/channels/{channel}"),
        "description": description,
        "messages": [_ref(f"#/channels/{channel}/messages/{name}") for name in messages],
        "bindings": {"amqp": {**binding, "bindingVersion": AMQP_BINDING_VERSION}},
    }
    if reply is not None:
        operation["reply"] = reply
    return operation


# -- messages and their payload schemas (from the pydantic models) ----------------------------

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
    MemoriesReverted: "Audit: an operator put back the memories some revisions had changed.",
    DataRequestRequested: "A person's data (or a server's) to export or erase, on request.",
    DataRequestCompleted: "The answer to a data request: done, with its receipt, or refused.",
    SubjectExported: "Audit: a person's data was exported (no text).",
    SubjectErased: "Audit: a person's or a server's data was erased (counts only).",
    NoticeRetract: "The shard's gateway deletes a notice it posted about an erased memory.",
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

# The headers a dead-lettered call may carry: the worker's, then the broker's.
_DEAD_LETTER_HEADERS: Final[dict[str, Any]] = {
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
        "description": "Deliveries of the call before the worker gave up on it, that one included.",
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
    "x-first-death-exchange": {"type": "string", "description": "Set by the broker."},
}


def _headers(
    extra: dict[str, Any] | None = None,
    *,
    required: tuple[str, ...] = ("schema_version",),
    version: int = SCHEMA_VERSION,
) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "schema_version": {"type": "integer", "const": version},
        **(extra or {}),
    }
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
        "headers": _headers(_EXTRA_HEADERS.get(model), version=model.SCHEMA_VERSION),
        "payload": _ref(SCHEMAS + name),
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
        title=DEAD_LETTERED,
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
        # A body that is not a tool call may have come without the schema_version header.
        headers=_headers(_DEAD_LETTER_HEADERS, required=()),
    )
    return dead


def _schemas() -> dict[str, Any]:
    """Every model's JSON schema and the definitions they share, by name."""
    schemas: dict[str, Any] = {}
    for model in EVENT_TYPES.values():
        schema = model.model_json_schema(ref_template=SCHEMAS + "{model}")
        for name, definition in schema.pop("$defs", {}).items():
            schemas.setdefault(name, definition)
        schemas[MESSAGE_NAMES[model]] = schema
    return dict(sorted(schemas.items()))


if __name__ == "__main__":
    sys.exit(main())
