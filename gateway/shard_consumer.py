"""Consumes this process's shard queues (`<prefix>.gateway.shard.<n>`), with manual acks.

- `tool_call.completed` wakes the tool call waiting in this process (`ToolClient.resolve`).
- `embed.requested` is sent (Discord, or the terminal): acknowledged once sent or once it can
  never succeed, requeued when Discord stayed unreachable for the sender's retry budget.
- Deduplicated by `event_id`: a bounded LRU of the ids handled to completion, and a per-id
  lock so that two copies delivered at once are handled one after the other. A redelivered or
  duplicated embed is never sent twice by this process (and Discord's `enforce_nonce` covers a
  copy that reaches another process within a few minutes).
- An undecodable message, or an event that does not belong on a shard queue, is logged and
  rejected without requeue.
- While tracing is on, each delivery is a CONSUMER span continuing the trace in its headers
  (the call's): the result's delivery, and the embed's, whose send is its child.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Protocol

from aio_pika.abc import AbstractChannel, AbstractIncomingMessage

from contracts import EmbedRequested, Event, ToolCallCompleted, Topology
from gateway.consumer import EventConsumer
from gateway.delivery import Delivery, EmbedSender
from gateway.metrics import GatewayMetrics
from infra.messaging.settlement import Outcome
from infra.messaging.topology import declare_shard_queue
from infra.observability.logs import get_logger

__all__ = ["ResultSink", "SeenEvents", "ShardConsumer"]

log = get_logger(__name__)


class ResultSink(Protocol):
    """Where results go: the `ToolClient` of this process."""

    def resolve(self, completed: ToolCallCompleted) -> bool: ...


class SeenEvents:
    """A bounded LRU of event ids handled to completion."""

    def __init__(self, capacity: int = 50_000) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._ids: OrderedDict[uuid.UUID, None] = OrderedDict()

    def __contains__(self, event_id: object) -> bool:
        return event_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, event_id: uuid.UUID) -> None:
        self._ids[event_id] = None
        self._ids.move_to_end(event_id)
        while len(self._ids) > self.capacity:
            self._ids.popitem(last=False)


class _KeyedLocks:
    """One lock per key while someone holds or waits for it; forgotten afterwards."""

    def __init__(self) -> None:
        self._locks: dict[uuid.UUID, tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, key: uuid.UUID) -> AsyncIterator[None]:
        lock, users = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users <= 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)


class ShardConsumer(EventConsumer):
    """Consumes the queues of the shards this process owns."""

    log_prefix = "shard"
    accepts = (ToolCallCompleted, EmbedRequested)
    traced = True

    def __init__(
        self,
        channel: AbstractChannel,
        topology: Topology,
        *,
        sender: EmbedSender,
        results: ResultSink,
        seen: SeenEvents | None = None,
        metrics: GatewayMetrics | None = None,
    ) -> None:
        """`channel` should have a prefetch (QoS) set: it bounds the deliveries in flight."""
        super().__init__(channel, topology, metrics)
        self._sender = sender
        self._results = results
        self.seen = seen or SeenEvents()
        self._locks = _KeyedLocks()
        self._shards: set[int] = set()
        # Sends run as tasks of their own: a channel closing cancels the delivery's handler,
        # not a POST already on its way, and the redelivered copy waits for that POST.
        self._sending: dict[uuid.UUID, asyncio.Task[Delivery]] = {}

    @property
    def shards(self) -> tuple[int, ...]:
        return tuple(sorted(self._shards))

    async def start(self, shards: Iterable[int]) -> None:
        """Declares (idempotently) and consumes each shard's queue; already consumed ones stay."""
        for shard_id in shards:
            if shard_id in self._shards:
                continue
            queue = await declare_shard_queue(self._channel, self._topology, shard_id)
            await self._consume(queue)
            self._shards.add(shard_id)
            log.info("shard.consuming", shard_id=shard_id, queue=queue.name)

    async def stop(self, grace_s: float = 20.0) -> None:
        """Stops taking deliveries, waits up to `grace_s` for those being handled, and for the
        sends under way."""
        await super().stop(grace_s)
        self._shards.clear()
        sending = list(self._sending.values())
        if sending:
            _, late = await asyncio.wait(sending, timeout=grace_s)
            for task in late:
                task.cancel()

    async def _handle(self, event: Event, message: AbstractIncomingMessage) -> Outcome:
        assert isinstance(event, ToolCallCompleted | EmbedRequested)
        async with self._locks.hold(event.event_id):
            if event.event_id in self.seen:
                log.info(
                    "shard.duplicate",
                    event_type=event.event_type,
                    event_id=str(event.event_id),
                    tool_call_id=event.tool_call_id,
                    redelivered=message.redelivered,
                )
                return Outcome.HANDLED
            if isinstance(event, ToolCallCompleted):
                waiting = self._results.resolve(event)
                self._metrics.results.labels(str(waiting).lower()).inc()
                self.seen.add(event.event_id)
                return Outcome.HANDLED
            sent = await asyncio.shield(self._send_once(event))
            return Outcome.RETRY_LATER if sent is Delivery.RETRY_LATER else Outcome.HANDLED

    def _send_once(self, event: EmbedRequested) -> asyncio.Task[Delivery]:
        """The send of this event: the one under way, or a new one."""
        task = self._sending.get(event.event_id)
        if task is None:
            task = asyncio.create_task(self._send(event), name=f"embed-{event.event_id}")
            self._sending[event.event_id] = task
            task.add_done_callback(lambda _: self._sending.pop(event.event_id, None))
        return task

    async def _send(self, event: EmbedRequested) -> Delivery:
        try:
            outcome = await self._sender.send(event)
        except Exception:
            # Not a failure the sender knows (a bug, most likely): requeuing would repeat it.
            log.exception(
                "embed.send_crashed", tool_call_id=event.tool_call_id, event_id=str(event.event_id)
            )
            self._metrics.embed_failed("crashed")
            outcome = Delivery.DROPPED
        self._metrics.embeds.labels(outcome.value).inc()
        if outcome is not Delivery.RETRY_LATER:
            # Recorded here, not by the handler: the handler may be gone by now.
            self.seen.add(event.event_id)
        return outcome
