"""Declares the broker topology of docs/contract.md, idempotently, under a prefix.

What is declared is `contracts.topology_declarations`: the same data `ltm broker-definitions`
writes out for a broker to load at boot, so that the two cannot diverge.

A process declares what its broker account may declare. The worker and `ltm topology`
declare the whole topology; a gateway process, whose account (the bots') may not, checks the
shared part passively and declares only its own queues (`ensure_topology`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import aio_pika
import aiormq
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractExchange, AbstractQueue

from contracts import (
    CACHE_BINDING_KEY,
    TOOL_NAMES,
    Declarations,
    Topology,
    shard_declarations,
    topology_declarations,
)
from infra.observability.logs import get_logger

__all__ = [
    "SUPERSEDED_AUDIT_BINDING_KEYS",
    "ReplicasMismatch",
    "TopologyMissing",
    "declare",
    "declare_cache_queue",
    "declare_shard_queue",
    "declare_topology",
    "ensure_topology",
]

log = get_logger(__name__)


class TopologyMissing(RuntimeError):
    """The shared topology is not there, and this broker account may not declare it."""


class ReplicasMismatch(RuntimeError):
    """A queue exists with another number of replicas than this process declares it with:
    `LTM_AMQP_REPLICAS` differs between the processes (or was changed after the first start)."""


# The arguments `LTM_AMQP_REPLICAS` sets; the broker names the one it found inequivalent.
_REPLICA_ARGUMENTS = ("x-quorum-initial-group-size", "x-initial-cluster-size")


async def declare(channel: AbstractChannel, declarations: Declarations) -> list[AbstractQueue]:
    """Declares the exchanges and queues and binds them; returns the queues, in order.

    A binding's exchange that `declarations` does not declare must exist already.
    """
    exchanges: dict[str, AbstractExchange] = {}
    for name in declarations.exchanges:
        exchanges[name] = await channel.declare_exchange(
            name, aio_pika.ExchangeType.TOPIC, durable=True
        )
    queues: dict[str, AbstractQueue] = {}
    for queue in declarations.queues:
        try:
            queues[queue.name] = await channel.declare_queue(
                queue.name, durable=True, arguments=dict(queue.arguments)
            )
        except aiormq.exceptions.ChannelPreconditionFailed as error:
            if not any(argument in str(error) for argument in _REPLICA_ARGUMENTS):
                raise
            replicas = next(
                (queue.arguments[a] for a in _REPLICA_ARGUMENTS if a in queue.arguments), None
            )
            raise ReplicasMismatch(
                f"queue {queue.name} exists with another number of replicas than "
                f"LTM_AMQP_REPLICAS={'unset' if replicas is None else replicas} of this "
                "process: every process of a deployment must use the same LTM_AMQP_REPLICAS, "
                f"the one the queues were first declared with ({error})"
            ) from None
    for binding in declarations.bindings:
        exchange = exchanges.get(binding.exchange) or await channel.get_exchange(
            binding.exchange, ensure=False
        )
        await queues[binding.queue].bind(exchange, routing_key=binding.routing_key)
    return list(queues.values())


# What the audit stream was bound with before it held only changes, operators' acts and data
# requests: a deployment declared before that still has it, and would keep every result and
# embed (with their texts) on the stream. Unbinding a binding that is not there changes nothing.
SUPERSEDED_AUDIT_BINDING_KEYS: Final = ("#",)


async def declare_topology(
    channel: AbstractChannel, topology: Topology, shards: Iterable[int] = ()
) -> None:
    """Everything the worker and the operators' tools need, plus the given shards' queues;
    the audit stream's superseded binding removed."""
    queues = await declare(channel, topology_declarations(topology, TOOL_NAMES, shards))
    stream = next(queue for queue in queues if queue.name == topology.audit_stream)
    for key in SUPERSEDED_AUDIT_BINDING_KEYS:
        await stream.unbind(topology.events_exchange, routing_key=key)


async def ensure_topology(connection: AbstractConnection, topology: Topology) -> None:
    """Checks passively that the shared topology exists, and declares it when it does not.

    An account that may not declare it (the bots') gets `TopologyMissing`, saying what to do,
    instead of a channel closed on an access refused. Each check has a channel of its own
    (a failed one closes it), plain, never reopened by a robust connection.
    """
    declarations = topology_declarations(topology, TOOL_NAMES)
    missing = await _first_missing(connection, declarations)
    if missing is None:
        return
    log.info("topology.declaring_missing", missing=missing, prefix=topology.prefix)
    channel = await aio_pika.Channel(connection)
    try:
        await declare(channel, declarations)
    except aiormq.exceptions.ChannelAccessRefused as error:
        raise TopologyMissing(
            f"{missing} does not exist and this broker account may not declare it: load the "
            "definitions of `ltm broker-definitions` into the broker, or run `ltm topology` "
            f"as the worker's account ({error})"
        ) from None
    finally:
        await _close(channel)


async def _first_missing(connection: AbstractConnection, declarations: Declarations) -> str | None:
    channel = await aio_pika.Channel(connection)
    name = ""
    try:
        for name in declarations.exchanges:
            await channel.declare_exchange(name, passive=True)
        for name in (queue.name for queue in declarations.queues):
            await channel.declare_queue(name, passive=True)
    except aiormq.exceptions.ChannelNotFoundEntity:
        return name
    finally:
        await _close(channel)
    return None


async def _close(channel: AbstractChannel) -> None:
    if not channel.is_closed:
        await channel.close()


async def declare_shard_queue(
    channel: AbstractChannel, topology: Topology, shard_id: int
) -> AbstractQueue:
    """A shard's queue, bound to the events exchange (which must exist)."""
    [queue] = await declare(channel, shard_declarations(topology, shard_id))
    return queue


async def declare_cache_queue(
    channel: AbstractChannel, topology: Topology, instance: str
) -> AbstractQueue:
    """A per-process queue of every invalidation; named, so it survives a reconnect's redeclare.

    The events exchange must exist: it is bound to, not declared.
    """
    events = await channel.get_exchange(topology.events_exchange, ensure=False)
    queue = await channel.declare_queue(
        topology.cache_queue(instance), exclusive=True, auto_delete=True
    )
    await queue.bind(events, routing_key=CACHE_BINDING_KEY)
    return queue
