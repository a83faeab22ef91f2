"""One delivered tool call: admitted, decoded, handed to the batcher, answered, settled.

`handle` is the decision flow and says what became of the delivery (an
`infra.messaging.settlement.Outcome`); `on_delivery` settles it, the one place that does.
Settling comes last: a crash anywhere before it redelivers the call, and the idempotency
record turns the second run into a repeat of the stored answer (docs/architecture.md, crash
table). Metrics, tracing and failpoints hang on the points of `worker.runtime.hooks`.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, Final, NamedTuple

import structlog
from aiormq.abc import DeliveredMessage

from contracts import (
    DATA_REQUEST_ROUTING_KEY,
    DataRequestRequested,
    InvalidEnvelope,
    ToolCallRequested,
    decode_event,
    decode_tool_call,
    result_routing_key,
)
from infra.messaging.settlement import Outcome, settle_delivered
from infra.observability import tracing
from infra.observability.logs import error_summary, get_logger
from infra.settings import Settings
from worker.adapters.broker import dead_letter_ids
from worker.batching import CallBatcher, GroupCommit
from worker.core.admission import refusal
from worker.runtime.batch_runner import Submitted
from worker.runtime.connection import Links
from worker.runtime.data_requests import DataRequestFailed, DataRequests
from worker.runtime.hooks import DeliveryHooks
from worker.runtime.retry import is_transient_database_fault
from worker.service import Processed
from worker.tools.base import Tool, result_for
from worker.tools.registry import tool_for

__all__ = ["DeliveryHandler", "Handled"]

log = get_logger("ltm.worker")


class Handled(NamedTuple):
    """What became of a delivery, and what the hooks are told of it once it is acked."""

    outcome: Outcome
    processed: Processed | None = None  # answered: the call's result
    cause: str | None = None  # dead-lettered: why, as the metrics label it


_REDELIVER: Final = Handled(Outcome.REDELIVER)


class DeliveryHandler:
    """The consumer callback of the work queue (`on_delivery`); tracks what is in flight."""

    def __init__(
        self,
        settings: Settings,
        links: Links,
        *,
        hooks: DeliveryHooks,
        batcher: CallBatcher[Submitted, Processed],
        published: GroupCommit[uuid.UUID],
        data_requests: DataRequests | None = None,
    ) -> None:
        """`data_requests`: None in a worker that takes tool calls only (a test's)."""
        self._settings = settings
        self._data_requests = data_requests
        self._links = links
        self._hooks = hooks
        self._batcher = batcher
        self._published = published
        self._reply_ttl_ms = settings.reply_ttl_s * 1000
        self.in_flight: set[asyncio.Task[Any]] = set()

    async def on_delivery(self, message: DeliveredMessage) -> None:
        """Handles the delivery, then settles it as `handle` says: the one place that does."""
        task = asyncio.current_task()
        assert task is not None
        self.in_flight.add(task)
        delivered_at = time.perf_counter()
        try:
            with (
                structlog.contextvars.bound_contextvars(
                    event_id=message.header.properties.message_id
                ),
                self._hooks.processing(message),
            ):
                try:
                    handled = await self.handle(message, delivered_at)
                except Exception as error:
                    # The answer, or the dead-letter copy, was not published (a connection
                    # lost, a publish refused): the call goes back and comes again. What
                    # committed waits in the outbox for the sweep; the redelivered call
                    # answers again from the stored result.
                    self._left_for_redelivery(error)
                    handled = _REDELIVER
                await self._settle(message, handled, delivered_at)
        finally:
            self.in_flight.discard(task)

    async def _settle(
        self, message: DeliveredMessage, handled: Handled, delivered_at: float
    ) -> None:
        """The delivery's one settlement, then what follows its ack."""
        try:
            await settle_delivered(message, handled.outcome)
        except Exception as error:
            # The channel is gone, and with it the delivery: the broker requeues it.
            if handled is not _REDELIVER:
                self._left_for_redelivery(error)
            return
        if handled is _REDELIVER:
            return
        self._hooks.after_ack(handled.outcome, delivered_at, handled.processed, handled.cause)
        if handled.processed is not None:
            result = handled.processed.result
            log.info(
                "worker.call_answered",
                status=result.status.value,
                replayed=handled.processed.replayed,
                memory_id=result.data.memory_id,
            )

    def _left_for_redelivery(self, error: Exception) -> None:
        log.warning("worker.call_left_for_redelivery", error=error_summary(error))
        self._hooks.left_for_redelivery(error)

    async def handle(self, message: DeliveredMessage, delivered_at: float) -> Handled:
        """What becomes of the delivery; raises when its answer could not be published.
        `delivered_at`: `time.perf_counter()` when the delivery came, for the latencies."""
        refused = refusal(
            user_id=message.header.properties.user_id,
            size=len(message.body),
            trusted_publishers=self._settings.trusted_publishers,
            max_bytes=self._settings.max_message_bytes,
        )
        if refused is not None:
            return await self._dead_letter(message, refused.reason, refused.cause, read_body=False)
        # One comparison on the tool calls' path: a data request runs on its own.
        if message.routing_key == DATA_REQUEST_ROUTING_KEY:
            return await self._data_request(message)
        try:
            call = decode_tool_call(message.body)
        except InvalidEnvelope as error:
            return await self._dead_letter(
                message, f"invalid envelope: {error}", "invalid_envelope"
            )
        # Bound until the delivery's task ends (each has a context of its own), so that the
        # caller's lines about this call carry its id too.
        structlog.contextvars.bind_contextvars(tool_call_id=call.tool_call_id)
        tool = tool_for(call.tool_name)
        if tool is None:
            reason = f"unsupported tool {call.tool_name!r}: no pipeline of this worker takes it"
            return await self._dead_letter(message, reason, "unsupported_tool")
        try:
            processed = await self._batcher.submit(
                call.tool_call_id, Submitted(call, tracing.current_span())
            )
        except Exception as error:
            return await self._give_up(message, call, tool, error, delivered_at)
        return await self._deliver(processed, delivered_at)

    async def _data_request(self, message: DeliveredMessage) -> Handled:
        """A data request, answered by `DataRequests`; dead-lettered when it is no valid one,
        or when its database work failed for good."""
        try:
            request = decode_event(message.body)
        except InvalidEnvelope as error:
            return await self._dead_letter(
                message, f"invalid envelope: {error}", "invalid_envelope"
            )
        if not isinstance(request, DataRequestRequested) or self._data_requests is None:
            reason = f"unsupported event {request.event_type!r} with routing key data_request"
            return await self._dead_letter(message, reason, "invalid_envelope")
        structlog.contextvars.bind_contextvars(request_id=request.request_id)
        try:
            await self._data_requests.answer(
                request, publisher_user_id=message.header.properties.user_id
            )
        except DataRequestFailed as failed:
            return await self._dead_letter(message, failed.reason, failed.cause)
        return Handled(Outcome.HANDLED)

    async def _give_up(
        self,
        message: DeliveredMessage,
        call: ToolCallRequested,
        tool: Tool,
        error: Exception,
        delivered_at: float,
    ) -> Handled:
        """The pipeline failed for good: the bot gets an error result, the call a dead letter."""
        database_away = is_transient_database_fault(error)
        if database_away:
            log.error("worker.db_unavailable", error=error_summary(error))
            # The summary, not the repr: a database error's repr quotes its statement's
            # parameters (the call's arguments), and the reason is logged and kept.
            reason, cause = f"database unavailable: {error_summary(error)}", "db_error"
        else:
            log.exception("worker.pipeline_failed")
            reason, cause = f"internal error: {error_summary(error)}", "internal_error"
        # A result the database could not hold: sent directly, so the bot is not left waiting.
        failure = tool.unrecorded(database_away=database_away)
        result = result_for(call, failure.status, failure.message, failure.data)
        publisher, shard_queues = self._links.both()
        await shard_queues.ensure(result.shard_id)
        await publisher.publish_event(
            result, result_routing_key(call.context.shard_id), self._reply_ttl_ms
        )
        self._hooks.after_publish(result, None, delivered_at)
        return await self._dead_letter(message, reason, cause)

    async def _deliver(self, processed: Processed, delivered_at: float) -> Handled:
        """Publishes what committed and marks it; the ack is the caller's."""
        # Read one by one, not through `Links.both()`: no tuple made per call.
        publisher, shard_queues = self._links.publisher, self._links.shard_queues
        assert publisher is not None and shard_queues is not None
        result = processed.result
        if processed.reused_id:
            log.warning("worker.tool_call_id_reused", status=result.status.value)
        if processed.written:
            self._hooks.after_commit(processed)
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
        self._hooks.after_publish(result, processed, delivered_at)
        if processed.outbox:
            try:
                await self._published.submit([row.event_id for row in processed.outbox])
            except Exception as error:
                log.warning("worker.outbox_mark_failed", error=error_summary(error))
            self._hooks.after_mark(processed)
        return Handled(Outcome.HANDLED, processed=processed)

    async def _dead_letter(
        self, message: DeliveredMessage, reason: str, cause: str, *, read_body: bool = True
    ) -> Handled:
        """Publishes the dead-letter copy with its reason; the original's ack is the caller's.
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
        self._hooks.before_dead_letter(cause, reason)
        await publisher.dead_letter(message, reason, event_id=ids.event_id)
        return Handled(Outcome.DEAD_LETTERED, cause=cause)
