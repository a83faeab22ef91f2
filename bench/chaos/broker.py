"""The chaos run's own broker connection, supervised: it publishes the tool calls (confirmed,
again after the broker drops the connection) and taps the results and embeds that come out.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field

import aio_pika
import aiormq
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractIncomingMessage

from contracts import (
    DATA_REQUEST_ROUTING_KEY,
    DataRequestRequested,
    EmbedRequested,
    InvalidEnvelope,
    MemoryStatus,
    ToolCallCompleted,
    ToolCallRequested,
    Topology,
    amqp_properties,
    decode_event,
    encode_event,
    shard_queue_arguments,
)
from harness.broker import delete_topology
from infra.messaging.amqp import UNREACHABLE, BrokerNodes, connect
from infra.messaging.confirms import ConfirmingChannel
from infra.messaging.topology import declare_topology
from infra.settings import Settings

__all__ = ["Collected", "HarnessBroker", "delete_run_topology"]


@dataclass
class Collected:
    results: dict[str, list[ToolCallCompleted]] = field(default_factory=lambda: defaultdict(list))
    embeds: dict[str, dict[uuid.UUID, EmbedRequested]] = field(
        default_factory=lambda: defaultdict(dict)
    )
    seen: set[uuid.UUID] = field(default_factory=set)
    undecodable: int = 0
    # When each result arrived (time.monotonic()), its call and status: how soon calls were
    # answered again after a fault.
    arrivals: list[tuple[float, str, MemoryStatus]] = field(default_factory=list)


class HarnessBroker:
    """The harness's own connection, supervised: publishing tool calls (confirmed, retried
    after the broker drops the connection, on the next node of a cluster) and, with `tap`, a
    durable tap on results and embeds (replicated like the topology's queues on a cluster)."""

    def __init__(
        self,
        settings: Settings,
        topology: Topology,
        *,
        name: str = "chaos-harness",
        tap: bool = True,
    ) -> None:
        self.settings = settings
        self.topology = topology
        self.name = name
        self.tap = tap
        self.tap_queue = f"{topology.prefix}.chaos.tap"
        self._nodes = BrokerNodes.of(settings)
        self.collected = Collected()
        self.reconnects = 0
        self._publishing: ConfirmingChannel | None = None
        self._ready = asyncio.Event()
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._supervise(), name=self.name)
        await asyncio.wait_for(self._ready.wait(), 30)

    async def stop(self) -> None:
        self._stopping.set()
        if self._task is not None:
            await self._task

    async def _supervise(self) -> None:
        first = True
        while not self._stopping.is_set():
            try:
                connection = await self._nodes.connect(
                    client_properties={"connection_name": self.name}
                )
            except UNREACHABLE:
                await asyncio.sleep(0.2)
                continue
            if not first:
                self.reconnects += 1
            first = False
            try:
                await self._serve(connection)
            except Exception:  # the broker went away while setting up: connect again
                await asyncio.sleep(0.2)
            finally:
                self._ready.clear()
                self._publishing = None
                with contextlib.suppress(Exception):
                    await connection.close()

    async def _serve(self, connection: AbstractConnection) -> None:
        lost = asyncio.Event()
        connection.close_callbacks.add(lambda *_: lost.set())
        # A channel the broker closed (the connection still up) also means: start again.
        publishing = await ConfirmingChannel.open(connection, on_lost=lost.set)
        await declare_topology(publishing.channel, self.topology)
        consume = await self._consume_tap(connection, lost) if self.tap else None
        self._publishing = publishing
        self._ready.set()
        stopping = asyncio.create_task(self._stopping.wait())
        closed = asyncio.create_task(lost.wait())
        await asyncio.wait({stopping, closed}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        closed.cancel()
        if self._stopping.is_set() and consume is not None:
            with contextlib.suppress(Exception):
                await consume.queue_delete(self.tap_queue)

    async def _consume_tap(
        self, connection: AbstractConnection, lost: asyncio.Event
    ) -> AbstractChannel:
        consume = await connection.channel()
        consume.close_callbacks.add(lambda *_: lost.set())
        await consume.set_qos(prefetch_count=500)
        replicas = self.topology.replicas
        arguments = None if replicas is None else shard_queue_arguments(replicas)
        queue = await consume.declare_queue(self.tap_queue, durable=True, arguments=arguments)
        events = await consume.get_exchange(self.topology.events_exchange, ensure=False)
        for key in ("result.shard.*", "embed.shard.*"):
            await queue.bind(events, routing_key=key)
        await queue.consume(self._collect)
        return consume

    async def _collect(self, message: AbstractIncomingMessage) -> None:
        try:
            event = decode_event(message.body)
        except InvalidEnvelope:
            self.collected.undecodable += 1
            await message.ack()
            return
        if event.event_id not in self.collected.seen:
            self.collected.seen.add(event.event_id)
            if isinstance(event, ToolCallCompleted):
                self.collected.results[event.tool_call_id].append(event)
                self.collected.arrivals.append((time.monotonic(), event.tool_call_id, event.status))
            elif isinstance(event, EmbedRequested):
                self.collected.embeds[event.tool_call_id][event.event_id] = event
        await message.ack()

    async def publish(self, call: ToolCallRequested | DataRequestRequested) -> None:
        """Until the broker confirms it; a copy may get through twice, as with any bot."""
        body = encode_event(call)
        routing_key = (
            DATA_REQUEST_ROUTING_KEY if isinstance(call, DataRequestRequested) else call.tool_name
        )
        for _ in range(600):
            await asyncio.wait_for(self._ready.wait(), 60)
            publishing = self._publishing
            if publishing is None:
                continue
            channel = publishing.channel
            try:
                exchange = await channel.get_exchange(
                    self.topology.tool_calls_exchange, ensure=False
                )
                await exchange.publish(
                    aio_pika.Message(body, **amqp_properties(call)), routing_key=routing_key
                )
                return
            except Exception as error:
                if isinstance(error, aiormq.exceptions.DeliveryError):
                    publishing.refused(channel)  # the next try goes out on a new channel
                await asyncio.sleep(0.1)
        raise RuntimeError(f"could not publish {call.correlation_id}")

    async def depth(self, queue: str) -> int | None:
        """Ready messages in the queue; None while the connection is down."""
        if self._publishing is None:
            return None
        channel = self._publishing.channel
        try:
            declared = await channel.declare_queue(queue, passive=True)
        except Exception:
            return None
        return int(declared.declaration_result.message_count or 0)


async def delete_run_topology(settings: Settings, topology: Topology, shards: int) -> None:
    """This run's queues and exchanges, so that the virtual host is left as it was."""
    with contextlib.suppress(Exception):
        connection = await connect(settings)
        async with connection:
            channel = await connection.channel()
            for queue in (
                f"{topology.prefix}.chaos.tap",
                *(topology.shard_queue(shard) for shard in range(shards)),
            ):
                await channel.queue_delete(queue)
            await delete_topology(channel, topology)
