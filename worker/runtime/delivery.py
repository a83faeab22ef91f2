"""One delivered tool call: admitted, decoded, handed to the batcher, answered, settled.

Settling comes last, through `infra.messaging.settlement`: a crash anywhere before it redelivers the
call, and the idempotency record turns the second run into a repeat of the stored answer
(docs/architecture.md, crash table).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from typing import Any

import structlog
from aiormq.abc import DeliveredMessage

from contracts import (
    InvalidEnvelope,
    ToolCallRequested,
    Topology,
    decode_tool_call,
    result_routing_key,
)
from infra.messaging.settlement import Outcome, settle_delivered
from infra.observability import tracing
from infra.observability.logs import get_logger
from infra.settings import Settings
from worker import failpoints
from worker.adapters.broker import dead_letter_ids
from worker.adapters.metrics import WorkerMetrics
from worker.batching import CallBatcher, GroupCommit
from worker.core.admission import refusal
from worker.core.model import Rejection
from worker.runtime.connection import Links
from worker.runtime.pipeline import Submitted
from worker.runtime.retry import is_transient
from worker.service import Processed
from worker.tools.base import result_for
from worker.tools.registry import tool_for

__all__ = ["DeliveryHandler"]

log = get_logger("ltm.worker")


class DeliveryHandler:
    """The consumer callback of the work queue (`on_delivery`); tracks what is in flight."""

    def __init__(
        self,
        settings: Settings,
        topology: Topology,
        links: Links,
        *,
        metrics: WorkerMetrics,
        batcher: CallBatcher[Submitted, Processed],
        published: GroupCommit[uuid.UUID],
    ) -> None:
        self._settings = settings
        self._topology = topology
        self._links = links
        self._metrics = metrics
        self._batcher = batcher
        self._published = published
        self._reply_ttl_ms = settings.reply_ttl_s * 1000
        self.in_flight: set[asyncio.Task[Any]] = set()

    async def on_delivery(self, message: DeliveredMessage) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.in_flight.add(task)
        delivered_at = time.perf_counter()
        try:
            properties = message.header.properties
            event_id = properties.message_id
            with (
                structlog.contextvars.bound_contextvars(event_id=event_id),
                tracing.processing(
                    headers=properties.headers,
                    exchange=message.exchange,
                    routing_key=message.routing_key,
                    queue=self._topology.worker_queue,
                    message_id=event_id,
                    conversation_id=properties.correlation_id,
                ) as span,
            ):
                try:
                    await self._handle(message, delivered_at)
                except Exception as error:
                    # The answer, or the dead-letter copy, was not published (a connection
                    # lost, a publish refused): the call goes back and comes again. What
                    # committed waits in the outbox for the sweep; the redelivered call
                    # answers again from the stored result.
                    log.warning("worker.call_left_for_redelivery", error=repr(error))
                    tracing.failed(span, type(error).__qualname__, "left for redelivery")
                    with contextlib.suppress(Exception):
                        await settle_delivered(message, Outcome.REDELIVER)
        finally:
            self.in_flight.discard(task)

    async def _handle(self, message: DeliveredMessage, delivered_at: float) -> None:
        """`delivered_at`: `time.perf_counter()` when the delivery came, for the latencies."""
        refused = refusal(
            user_id=message.header.properties.user_id,
            size=len(message.body),
            trusted_publishers=self._settings.trusted_publishers,
            max_bytes=self._settings.max_message_bytes,
        )
        if refused is not None:
            await self._dead_letter(
                message, refused.reason, refused.cause, delivered_at, read_body=False
            )
            return
        try:
            call = decode_tool_call(message.body)
        except InvalidEnvelope as error:
            reason = f"invalid envelope: {error}"
            await self._dead_letter(message, reason, "invalid_envelope", delivered_at)
            return
        # Bound until the delivery's task ends (each has a context of its own), so that the
        # caller's lines about this call carry its id too.
        structlog.contextvars.bind_contextvars(tool_call_id=call.tool_call_id)
        if tool_for(call.tool_name) is None:
            reason = f"unsupported tool {call.tool_name!r}: no pipeline of this worker takes it"
            await self._dead_letter(message, reason, "unsupported_tool", delivered_at)
            return
        try:
            processed = await self._batcher.submit(
                call.tool_call_id, Submitted(call, tracing.current_span())
            )
        except Exception as error:
            await self._give_up(message, call, error, delivered_at)
            return
        await self._deliver(message, call, processed, delivered_at)

    async def _give_up(
        self,
        message: DeliveredMessage,
        call: ToolCallRequested,
        error: Exception,
        delivered_at: float,
    ) -> None:
        """The pipeline failed for good: the bot gets an error result, the call a dead letter."""
        database_away = is_transient(error)
        if database_away:
            log.error("worker.db_unavailable", error=repr(error))
            reason, cause = f"database unavailable: {error!r}", "db_error"
        else:
            log.exception("worker.pipeline_failed")
            reason, cause = f"internal error: {error!r}", "internal_error"
        tool = tool_for(call.tool_name)
        assert tool is not None
        await self._answer_unrecorded(
            call, tool.unrecorded(database_away=database_away), delivered_at
        )
        await self._dead_letter(message, reason, cause, delivered_at)

    async def _deliver(
        self,
        message: DeliveredMessage,
        call: ToolCallRequested,
        processed: Processed,
        delivered_at: float,
    ) -> None:
        """Publishes what committed, marks it, then acks; a failure leaves it to redelivery."""
        publisher, shard_queues = self._links.both()
        result = processed.result
        if processed.reused_id:
            log.warning("worker.tool_call_id_reused", status=result.status.value)
        if processed.written:
            failpoints.reach("after_commit")
        await shard_queues.ensure(result.shard_id)
        if processed.written:
            await publisher.publish_rows(processed.outbox, in_call=True)
        else:
            await publisher.publish_event(
                result,
                result_routing_key(result.shard_id),
                self._reply_ttl_ms,
                replayed=processed.replayed,
            )
        # What the user waits for ends here: the result is with the broker.
        self._metrics.latency.observe(time.perf_counter() - delivered_at)
        if processed.outbox:
            await self._mark_published(processed)
        await settle_delivered(message, Outcome.HANDLED)
        self._metrics.ack_latency.observe(time.perf_counter() - delivered_at)
        self._metrics.calls.labels(
            result.tool_name, result.status.value, str(processed.replayed).lower()
        ).inc()
        log.info(
            "worker.call_answered",
            status=result.status.value,
            replayed=processed.replayed,
            memory_id=result.data.memory_id,
        )

    async def _mark_published(self, processed: Processed) -> None:
        failpoints.reach("after_publish")
        try:
            await self._published.submit([row.event_id for row in processed.outbox])
        except Exception as error:
            log.warning("worker.outbox_mark_failed", error=repr(error))
        failpoints.reach("after_mark")

    async def _answer_unrecorded(
        self, call: ToolCallRequested, failure: Rejection, delivered_at: float
    ) -> None:
        """A result the database could not hold: sent directly, so the bot is not left waiting."""
        publisher, shard_queues = self._links.both()
        result = result_for(call, failure.status, failure.message, failure.data)
        await shard_queues.ensure(result.shard_id)
        await publisher.publish_event(
            result, result_routing_key(call.context.shard_id), self._reply_ttl_ms
        )
        self._metrics.latency.observe(time.perf_counter() - delivered_at)
        self._metrics.calls.labels(call.tool_name, failure.status.value, "false").inc()

    async def _dead_letter(
        self,
        message: DeliveredMessage,
        reason: str,
        cause: str,
        delivered_at: float,
        *,
        read_body: bool = True,
    ) -> None:
        """Publishes the dead-letter copy with its reason, then settles the original.
        `read_body` False: nothing of the body is parsed, not even for its ids."""
        publisher, _ = self._links.both()
        # The ids the copy carries (`ltm dlq list` shows them), not only those that came.
        ids = dead_letter_ids(message, read_body=read_body)
        log.warning(
            "worker.dead_lettering",
            reason=reason,
            routing_key=message.routing_key,
            event_id=ids.event_id,
            tool_call_id=ids.tool_call_id,
        )
        tracing.failed(tracing.current_span(), cause, reason)
        await publisher.dead_letter(message, reason, event_id=ids.event_id)
        await settle_delivered(message, Outcome.DEAD_LETTERED)
        self._metrics.ack_latency.observe(time.perf_counter() - delivered_at)
        self._metrics.dead_lettered.labels(cause).inc()
