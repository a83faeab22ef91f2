"""The AsyncAPI document's channels: the exchanges' routing keys and the queues."""

from __future__ import annotations

from typing import Any, Final

from contracts.asyncapi_parts import (
    AMQP_BINDING_VERSION,
    AUDIT_MODELS,
    EMITTED_MODELS,
    MESSAGES,
    OPERATOR_MODELS,
    messages_of,
    ref,
)
from contracts.cache import CacheInvalidate
from contracts.dead_letters import (
    ATTEMPTS_HEADER,
    ERROR_HEADER,
    FAILED_AT_HEADER,
    ORIGINAL_USER_ID_HEADER,
)
from contracts.embeds import EmbedRequested
from contracts.operator import operator_routing_key
from contracts.results import ToolCallCompleted
from contracts.tool_calls import TOOL_NAMES, ToolCallRequested
from contracts.topology import (
    Topology,
    audit_routing_key,
    audit_stream_arguments,
    cache_routing_key,
    dead_letter_queue_arguments,
    shard_queue_arguments,
    worker_queue_arguments,
)

__all__ = ["channels"]

_SHARD: Final = {"shardId": {"description": "The bot shard's number (context.shard_id), >= 0."}}
_TOOL_NAME: Final = {"toolName": {"enum": list(TOOL_NAMES), "description": "The tool's name."}}
_DEAD_LETTERS: Final = {"DeadLetteredToolCall": ref(MESSAGES + "DeadLetteredToolCall")}


def channels(topology: Topology) -> dict[str, Any]:
    """Every channel, in the document's order: routing keys first, then queues."""
    return {
        **_call_channels(topology),
        **_record_channels(topology),
        **_work_queue_channels(topology),
        **_gateway_queue_channels(topology),
    }


def _exchange_binding(name: str) -> dict[str, Any]:
    return {
        "amqp": {
            "is": "routingKey",
            "exchange": {"name": name, "type": "topic", "durable": True, "autoDelete": False},
            "bindingVersion": AMQP_BINDING_VERSION,
        }
    }


def _queue_binding(name: str, *, durable: bool = True, exclusive: bool = False) -> dict[str, Any]:
    return {
        "amqp": {
            "is": "queue",
            "queue": {
                "name": name,
                "durable": durable,
                "exclusive": exclusive,
                "autoDelete": exclusive,
            },
            "bindingVersion": AMQP_BINDING_VERSION,
        }
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
    channel["bindings"] = _queue_binding(name, durable=not exclusive, exclusive=exclusive)
    # The AMQP binding object has no place for these: specification extensions carry them.
    channel["x-amqp-queue-arguments"] = arguments
    channel["x-amqp-queue-bindings"] = bound
    return channel


def _call_channels(topology: Topology) -> dict[str, Any]:
    """What a tool call sends on its way: the call, its answer, embeds, invalidations."""
    return {
        "toolCallRequested": {
            "address": "{toolName}",
            "description": (
                "Tool calls, routed by tool name (`remember_this_fact` is the old name of "
                "`create_long_term_memory`)."
            ),
            "messages": messages_of(ToolCallRequested),
            "parameters": _TOOL_NAME,
            "bindings": _exchange_binding(topology.tool_calls_exchange),
        },
        "toolCallCompleted": {
            "address": "result.shard.{shardId}",
            "description": "The result of a tool call, for the shard that published it.",
            "messages": messages_of(ToolCallCompleted),
            "parameters": _SHARD,
            "bindings": _exchange_binding(topology.events_exchange),
        },
        "embedRequested": {
            "address": "embed.shard.{shardId}",
            "description": "Embeds to post, for the shard that published the call.",
            "messages": messages_of(EmbedRequested),
            "parameters": _SHARD,
            "bindings": _exchange_binding(topology.events_exchange),
        },
        "cacheInvalidate": {
            "address": cache_routing_key("{cache}", "{key}"),
            "description": "Cache invalidations, for every gateway process.",
            "messages": messages_of(CacheInvalidate),
            "parameters": {
                "cache": {"enum": ["persona_state", "user"], "description": "Which cache."},
                "key": {"description": "Guild id (user id in a DM), or a user's Discord id."},
            },
            "bindings": _exchange_binding(topology.events_exchange),
        },
    }


def _record_channels(topology: Topology) -> dict[str, Any]:
    """The records of changes and operators' actions, and the dead letters."""
    return {
        "memoryChanged": {
            "address": audit_routing_key("{action}", "{scope}"),
            "description": "The audit trail of every change.",
            "messages": messages_of(*AUDIT_MODELS),
            "parameters": {
                "action": {"enum": ["created", "updated", "deleted", "restored"]},
                "scope": {"enum": ["server_wide", "target_user"]},
            },
            "bindings": _exchange_binding(topology.events_exchange),
        },
        "operatorAction": {
            "address": operator_routing_key("{action}"),
            "description": "What an operator did by hand to the dead letters (the console).",
            "messages": messages_of(*OPERATOR_MODELS),
            "parameters": {"action": {"enum": [model.ACTION for model in OPERATOR_MODELS]}},
            "bindings": _exchange_binding(topology.events_exchange),
        },
        "deadLetter": {
            "address": "{toolName}",
            "description": (
                "Tool calls the worker gave up on, with their original routing key, body and "
                f"properties. The worker republishes them here with the headers {ERROR_HEADER}, "
                f"{FAILED_AT_HEADER}, {ATTEMPTS_HEADER} and {ORIGINAL_USER_ID_HEADER}; the "
                "broker dead-letters here at the work queue's delivery limit, adding x-death."
            ),
            "messages": _DEAD_LETTERS,
            "parameters": _TOOL_NAME,
            "bindings": _exchange_binding(topology.dead_letter_exchange),
        },
    }


def _work_queue_channels(topology: Topology) -> dict[str, Any]:
    """The worker's queue and the dead-letter queue."""
    return {
        "workerQueue": _queue_channel(
            topology.worker_queue,
            "The worker's work queue. Every process declares it with exactly these arguments: "
            "a mismatch closes the channel.",
            messages_of(ToolCallRequested),
            arguments=worker_queue_arguments(topology),
            bound=[
                {"exchange": topology.tool_calls_exchange, "routingKey": name}
                for name in TOOL_NAMES
            ],
        ),
        "deadLetterQueue": _queue_channel(
            topology.dead_letter_queue,
            "Dead-lettered tool calls, for `ltm dlq list|replay|purge`.",
            _DEAD_LETTERS,
            arguments=dead_letter_queue_arguments(),
            bound=[{"exchange": topology.dead_letter_exchange, "routingKey": "#"}],
        ),
    }


def _gateway_queue_channels(topology: Topology) -> dict[str, Any]:
    """The gateways' queues and the audit stream."""
    return {
        "shardQueue": _queue_channel(
            # The queue's name with the shard number as a parameter.
            topology.shard_queue(0).rpartition(".")[0] + ".{shardId}",
            "One bot shard's results and embeds, consumed by the gateway process that owns it.",
            messages_of(ToolCallCompleted, EmbedRequested),
            arguments=shard_queue_arguments(),
            bound=[
                {"exchange": topology.events_exchange, "routingKey": "result.shard.{shardId}"},
                {"exchange": topology.events_exchange, "routingKey": "embed.shard.{shardId}"},
            ],
            parameters=_SHARD,
        ),
        "cacheQueue": _queue_channel(
            topology.cache_queue("{instance}"),
            "One gateway process's cache invalidations; named by the process so that it can "
            "be declared again after a reconnect.",
            messages_of(CacheInvalidate),
            arguments={},
            bound=[{"exchange": topology.events_exchange, "routingKey": "cache.#"}],
            parameters={"instance": {"description": "The gateway process's own instance name."}},
            exclusive=True,
        ),
        "auditStream": _queue_channel(
            topology.audit_stream,
            "Every event the worker emits, kept 30 days, readable from any offset "
            "(`ltm audit tail`).",
            messages_of(*EMITTED_MODELS),
            arguments=audit_stream_arguments(),
            bound=[{"exchange": topology.events_exchange, "routingKey": "#"}],
        ),
    }
