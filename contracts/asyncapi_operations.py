"""The AsyncAPI document's operations: who sends and who receives on each channel."""

from __future__ import annotations

from typing import Any, Final

from contracts.asyncapi_parts import (
    AMQP_BINDING_VERSION,
    AUDIT_MODELS,
    EMITTED_MODELS,
    MESSAGE_NAMES,
    OPERATOR_MODELS,
    ref,
)

__all__ = ["REPLY_TTL_MS", "operations"]

REPLY_TTL_MS: Final = 900_000  # LTM_REPLY_TTL_S's default

_PERSISTENT: Final = {"deliveryMode": 2, "timestamp": True}
_EXPIRING: Final = {**_PERSISTENT, "expiration": REPLY_TTL_MS}
_CONSUMING: Final = {"ack": True}


def operations() -> dict[str, Any]:
    """Every operation, in the document's order."""
    return {**_tool_call_operations(), **_notice_operations(), **_reading_operations()}


def _operation(
    action: str,
    channel: str,
    messages: list[str],
    description: str,
    *,
    binding: dict[str, Any] | None = None,
    reply: dict[str, Any] | None = None,
) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "action": action,
        "channel": ref(f"#/channels/{channel}"),
        "description": description,
        "messages": [ref(f"#/channels/{channel}/messages/{name}") for name in messages],
    }
    if binding is not None:
        operation["bindings"] = {"amqp": {**binding, "bindingVersion": AMQP_BINDING_VERSION}}
    if reply is not None:
        operation["reply"] = reply
    return operation


def _tool_call_operations() -> dict[str, Any]:
    """A tool call's round trip, and the embed that follows a change."""
    return {
        "requestToolCall": _operation(
            "send",
            "toolCallRequested",
            ["ToolCallRequested"],
            "A bot shard publishes the LLM's tool call and waits for its result.",
            binding={**_PERSISTENT, "mandatory": True},
            reply={
                "channel": ref("#/channels/toolCallCompleted"),
                "messages": [ref("#/channels/toolCallCompleted/messages/ToolCallCompleted")],
            },
        ),
        "consumeToolCalls": _operation(
            "receive",
            "workerQueue",
            ["ToolCallRequested"],
            "The worker runs each call once in effect (inbox on tool_call_id), then acks.",
            binding=_CONSUMING,
        ),
        "sendToolCallCompleted": _operation(
            "send",
            "toolCallCompleted",
            ["ToolCallCompleted"],
            "The worker answers; the message expires after LTM_REPLY_TTL_S.",
            binding=_EXPIRING,
        ),
        "sendEmbedRequested": _operation(
            "send",
            "embedRequested",
            ["EmbedRequested"],
            "After a committed change the worker asks the shard to post a notice.",
            binding=_EXPIRING,
        ),
    }


def _notice_operations() -> dict[str, Any]:
    """What the worker and operators publish besides answers."""
    return {
        "sendCacheInvalidate": _operation(
            "send",
            "cacheInvalidate",
            ["CacheInvalidate"],
            "After a change the worker tells every gateway process to drop a cache entry.",
            binding=_PERSISTENT,
        ),
        "sendMemoryChanged": _operation(
            "send",
            "memoryChanged",
            [MESSAGE_NAMES[model] for model in AUDIT_MODELS],
            "The worker (and `ltm memory restore`) records every change.",
            binding=_PERSISTENT,
        ),
        "sendOperatorAction": _operation(
            "send",
            "operatorAction",
            [MESSAGE_NAMES[model] for model in OPERATOR_MODELS],
            "The operator console records each replay and purge, with the operator's name.",
            binding=_PERSISTENT,
        ),
        "deadLetterToolCall": _operation(
            "send",
            "deadLetter",
            ["DeadLetteredToolCall"],
            "The worker gives up on a call it cannot process, with the reason.",
            binding=_PERSISTENT,
        ),
    }


def _reading_operations() -> dict[str, Any]:
    """The gateways' consumers and the operators' readers."""
    return {
        "consumeShardQueue": _operation(
            "receive",
            "shardQueue",
            ["ToolCallCompleted", "EmbedRequested"],
            "The gateway wakes the waiting tool client, or posts the embed.",
            binding=_CONSUMING,
        ),
        "consumeCacheInvalidations": _operation(
            "receive",
            "cacheQueue",
            ["CacheInvalidate"],
            "Each gateway process drops the entry from its caches.",
            binding=_CONSUMING,
        ),
        "tailAudit": _operation(
            "receive",
            "auditStream",
            [MESSAGE_NAMES[model] for model in EMITTED_MODELS],
            "Operators read the stream from an offset (x-stream-offset: first, last, a time).",
            binding=_CONSUMING,
        ),
        "inspectDeadLetters": _operation(
            "receive",
            "deadLetterQueue",
            ["DeadLetteredToolCall"],
            "`ltm dlq list|replay|purge`; a replay republishes with the original routing key.",
            binding=_CONSUMING,
        ),
    }
