"""Declares the broker topology of docs/contract.md, idempotently, under a prefix."""

from __future__ import annotations

from collections.abc import Iterable

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractExchange, AbstractQueue

from contracts import (
    TOOL_NAMES,
    Topology,
    audit_stream_arguments,
    dead_letter_queue_arguments,
    embed_routing_key,
    result_routing_key,
    shard_queue_arguments,
    worker_queue_arguments,
)

__all__ = [
    "declare_cache_queue",
    "declare_events_exchange",
    "declare_shard_queue",
    "declare_topology",
]


async def declare_topology(
    channel: AbstractChannel, topology: Topology, shards: Iterable[int] = ()
) -> None:
    """Everything the worker and the operators' tools need, plus the given shards' queues."""
    tool_calls = await channel.declare_exchange(
        topology.tool_calls_exchange, aio_pika.ExchangeType.TOPIC, durable=True
    )
    dead_letter = await channel.declare_exchange(
        topology.dead_letter_exchange, aio_pika.ExchangeType.TOPIC, durable=True
    )
    events = await declare_events_exchange(channel, topology)
    worker = await channel.declare_queue(
        topology.worker_queue, durable=True, arguments=worker_queue_arguments(topology)
    )
    for tool_name in TOOL_NAMES:
        await worker.bind(tool_calls, routing_key=tool_name)
    dead = await channel.declare_queue(
        topology.dead_letter_queue, durable=True, arguments=dead_letter_queue_arguments()
    )
    await dead.bind(dead_letter, routing_key="#")
    audit = await channel.declare_queue(
        topology.audit_stream, durable=True, arguments=audit_stream_arguments()
    )
    await audit.bind(events, routing_key="#")
    for shard_id in shards:
        await declare_shard_queue(channel, topology, shard_id, events=events)


async def declare_events_exchange(channel: AbstractChannel, topology: Topology) -> AbstractExchange:
    return await channel.declare_exchange(
        topology.events_exchange, aio_pika.ExchangeType.TOPIC, durable=True
    )


async def declare_shard_queue(
    channel: AbstractChannel,
    topology: Topology,
    shard_id: int,
    *,
    events: AbstractExchange | None = None,
) -> AbstractQueue:
    """`events`: the events exchange, when already declared on `channel`."""
    if events is None:
        events = await declare_events_exchange(channel, topology)
    queue = await channel.declare_queue(
        topology.shard_queue(shard_id), durable=True, arguments=shard_queue_arguments()
    )
    await queue.bind(events, routing_key=result_routing_key(shard_id))
    await queue.bind(events, routing_key=embed_routing_key(shard_id))
    return queue


async def declare_cache_queue(
    channel: AbstractChannel, topology: Topology, instance: str
) -> AbstractQueue:
    """A per-process queue of every invalidation; named, so it survives a reconnect's redeclare."""
    events = await declare_events_exchange(channel, topology)
    queue = await channel.declare_queue(
        topology.cache_queue(instance), exclusive=True, auto_delete=True
    )
    await queue.bind(events, routing_key="cache.#")
    return queue
