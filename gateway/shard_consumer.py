"""Consumes this process's shard queues (`<prefix>.gateway.shard.<n>`), with manual acks.

- `tool_call.completed` wakes the tool call waiting in this process (`ToolClient.resolve`),
  `data_request.completed` the data request (`DataRights.resolve`).
- `embed.requested` is sent (Discord, or the terminal): acknowledged once sent or once it can
  never succeed, requeued when Discord stayed unreachable for the sender's retry budget. A
  posted notice is recorded (`posted_notices`) before its event counts as handled: a record
  that fails requeues the event, and its redelivery records the message already posted (kept
  in this process until recorded) instead of posting it again.
- `notice.retract` deletes a notice this shard posted, then its record (a 404 counts as
  deleted); a 403 keeps the record, marked `forbidden`. Requeued while Discord or the
  database is away.
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

from contracts import (
    DataRequestCompleted,
    EmbedRequested,
    Event,
    NoticeRetract,
    ToolCallCompleted,
    Topology,
)
from gateway.consumer import EventConsumer
from gateway.delivery import Delivery, EmbedSender, Retraction, SendResult
from gateway.metrics import GatewayMetrics
from gateway.notices import NoticeRecords
from infra.messaging.settlement import Outcome
from infra.messaging.topology import declare_shard_queue
from infra.observability.logs import get_logger

__all__ = ["AnswerSink", "ResultSink", "SeenEvents", "ShardConsumer"]

log = get_logger(__name__)


class ResultSink(Protocol):
    """Where results go: the `ToolClient` of this process."""

    def resolve(self, completed: ToolCallCompleted) -> bool: ...


class AnswerSink(Protocol):
    """Where data requests' answers go: the `DataRights` of this process."""

    def resolve(self, completed: DataRequestCompleted) -> bool: ...


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
    accepts = (ToolCallCompleted, EmbedRequested, DataRequestCompleted, NoticeRetract)
    traced = True

    def __init__(
        self,
        channel: AbstractChannel,
        topology: Topology,
        *,
        sender: EmbedSender,
        results: ResultSink,
        answers: AnswerSink | None = None,
        notices: NoticeRecords | None = None,
        seen: SeenEvents | None = None,
        metrics: GatewayMetrics | None = None,
    ) -> None:
        """`channel` should have a prefetch (QoS) set: it bounds the deliveries in flight.

        `answers`: where data requests' answers go (None: acknowledged, nobody waits);
        `notices`: where posted notices are recorded (None: not recorded, and a retraction
        only deletes the message)."""
        super().__init__(channel, topology, metrics)
        self._sender = sender
        self._results = results
        self._answers = answers
        self._notices = notices
        self.seen = seen or SeenEvents()
        self._locks = _KeyedLocks()
        self._shards: set[int] = set()
        # Sends run as tasks of their own: a channel closing cancels the delivery's handler,
        # not a POST already on its way, and the redelivered copy waits for that POST.
        self._sending: dict[uuid.UUID, asyncio.Task[Delivery]] = {}
        # Posted, not yet recorded (the database away): a redelivery records, never reposts.
        self._unrecorded: dict[uuid.UUID, SendResult] = {}

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
        assert isinstance(
            event, ToolCallCompleted | EmbedRequested | DataRequestCompleted | NoticeRetract
        )
        async with self._locks.hold(event.event_id):
            if event.event_id in self.seen:
                log.info(
                    "shard.duplicate",
                    event_type=event.event_type,
                    event_id=str(event.event_id),
                    tool_call_id=event.correlation_id,
                    redelivered=message.redelivered,
                )
                return Outcome.HANDLED
            if isinstance(event, ToolCallCompleted):
                waiting = self._results.resolve(event)
                self._metrics.results.labels(str(waiting).lower()).inc()
                self.seen.add(event.event_id)
                return Outcome.HANDLED
            if isinstance(event, DataRequestCompleted):
                if self._answers is not None:
                    self._answers.resolve(event)
                self.seen.add(event.event_id)
                return Outcome.HANDLED
            if isinstance(event, NoticeRetract):
                return await self._retract(event)
            sent = await asyncio.shield(self._send_once(event))
            return Outcome.RETRY_LATER if sent is Delivery.RETRY_LATER else Outcome.HANDLED

    async def _retract(self, event: NoticeRetract) -> Outcome:
        """Deletes the message, then its record; a refusal is written on the record."""
        bound = log.bind(
            event_id=str(event.event_id),
            channel_id=event.channel_id,
            message_id=event.message_id,
            memory_id=event.memory_id,
        )
        retraction = await self._sender.retract(event.channel_id, event.message_id)
        if retraction is Retraction.RETRY_LATER:
            return Outcome.RETRY_LATER
        if self._notices is not None:
            try:
                if retraction is Retraction.DELETED:
                    await self._notices.retracted(event.channel_id, event.message_id)
                else:
                    await self._notices.refused(
                        event.channel_id,
                        event.message_id,
                        "forbidden" if retraction is Retraction.FORBIDDEN else "rejected",
                    )
            except Exception as error:
                # Deleting again is harmless (a 404 counts as deleted): try it all later.
                bound.warning("notice.record_not_updated", error=repr(error))
                return Outcome.RETRY_LATER
        bound.info("notice.retract_handled", outcome=retraction.value)
        self.seen.add(event.event_id)
        return Outcome.HANDLED

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
            sent = self._unrecorded.pop(event.event_id, None) or await self._sender.send(event)
            outcome = sent.delivery
            if sent.message_id is not None and not await self._recorded(event, sent):
                self._unrecorded[event.event_id] = sent
                outcome = Delivery.RETRY_LATER
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

    async def _recorded(self, event: EmbedRequested, sent: SendResult) -> bool:
        """Whether the posted notice is recorded (or needs no record); a failure is logged."""
        if self._notices is None or sent.message_id is None:
            return True
        try:
            await self._notices.record(event, sent.message_id)
        except Exception as error:
            log.warning(
                "embed.notice_not_recorded",
                tool_call_id=event.tool_call_id,
                event_id=str(event.event_id),
                error=repr(error),
            )
            self._metrics.embed_failed("unavailable")
            return False
        return True
