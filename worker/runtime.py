"""The long-running worker: consume tool calls, run the pipeline, commit, publish, ack.

Ack comes last: a crash anywhere before it redelivers the call, and the idempotency record
turns the second run into a repeat of the stored answer (docs/architecture.md, crash table).
The connection is supervised here rather than by `connect_robust`, so that every reconnect
rebuilds the channels, the topology and the consumer the same way the first start did.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import aiormq
import psycopg
import structlog
from aio_pika.abc import AbstractConnection
from aiormq.abc import DeliveredMessage
from opentelemetry.trace import Span
from sqlalchemy import exc as sa_exc
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_delay,
    wait_exponential_jitter,
)

from contracts import (
    InvalidEnvelope,
    ToolCallRequested,
    decode_tool_call,
    result_routing_key,
    shard_of_routing_key,
)
from infra import amqp, tracing
from infra.cancellation import being_cancelled
from infra.database import database_name
from infra.logs import get_logger
from infra.redaction import mask_passwords
from infra.settings import Settings
from infra.topology import declare_topology
from worker import failpoints
from worker.adapters.broker import EventPublisher, ShardQueues, dead_letter_ids
from worker.adapters.database import MemoryStore
from worker.adapters.metrics import WorkerMetrics
from worker.adapters.outbox import OutboxRow, OutboxStore
from worker.batching import CallBatcher, GroupCommit, TakenFlush
from worker.core.admission import refusal
from worker.core.model import Rejection
from worker.service import Processed, process_tool_calls
from worker.tools.base import answer
from worker.tools.registry import pipeline_for

__all__ = ["Worker", "is_transient"]

log = get_logger("ltm.worker")

_SWEEP_BATCH: Final = 500
# Rows younger than this are being published by the worker that wrote them.
_SWEEP_MIN_AGE_S: Final = 5.0
_RECONNECT_MAX_S: Final = 5.0
# Marking rows published delays only the ack, not the result. Under load the next batch's
# transaction marks them before this runs out; when idle, one UPDATE marks all that came.
_MARK_LINGER_S: Final = 0.05


# A lost or refused connection, an admin shutdown, …; and a server that takes no writes yet.
_TRANSIENT_DRIVER_ERRORS: Final = psycopg.OperationalError | psycopg.errors.ReadOnlySqlTransaction


def is_transient(error: BaseException) -> bool:
    """Lost connection, serialization failure, deadlock, admin shutdown, pool exhaustion, and a
    server that does not take writes yet (a standby being promoted: SQLSTATE 25006)."""
    if isinstance(error, sa_exc.DBAPIError):
        return error.connection_invalidated or isinstance(error.orig, _TRANSIENT_DRIVER_ERRORS)
    return isinstance(error, _TRANSIENT_DRIVER_ERRORS | sa_exc.TimeoutError | ConnectionError)


def waited_for_a_lock(error: BaseException) -> bool:
    """`lock_timeout` struck: a row of one call is locked from outside the worker."""
    cause = error.orig if isinstance(error, sa_exc.DBAPIError) else error
    return isinstance(cause, psycopg.errors.LockNotAvailable)


def _shared_by_the_batch(error: BaseException) -> bool:
    # A lock wait is one call's: the batch runs again one call at a time, and only the call
    # whose row is held fails (after its retries, `memory_update_failed_db_error`).
    return is_transient(error) and not waited_for_a_lock(error)


def _retried(error: BaseException, calls: Sequence[ToolCallRequested]) -> bool:
    """A batch retries only what it shares; a call alone, any transient fault."""
    return is_transient(error) if len(calls) == 1 else _shared_by_the_batch(error)


def _database_of(url: str) -> str | None:
    """The database the URL names, for the transaction's span; None for a URL naming none
    (libpq then takes the user's name)."""
    try:
        return database_name(url)
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class _Submitted:
    """A call handed to the batcher, with the span of its delivery (None: tracing off), which
    its transaction's span joins or links to."""

    call: ToolCallRequested
    span: Span | None


@dataclass
class Worker:
    settings: Settings
    store: MemoryStore
    outbox: OutboxStore
    metrics: WorkerMetrics = field(default_factory=WorkerMetrics)

    def __post_init__(self) -> None:
        self.topology = self.settings.topology
        self._publisher: EventPublisher | None = None
        self._shard_queues: ShardQueues | None = None
        self._in_flight: set[asyncio.Task[Any]] = set()
        self.metrics.in_flight.set_function(lambda: len(self._in_flight))
        self._consuming = False
        self._stopping = asyncio.Event()
        self._reply_ttl_ms = self.settings.reply_ttl_s * 1000
        # Which broker node next: a lost connection moves on to the node after it.
        self._broker_nodes = amqp.BrokerNodes.of(self.settings)
        self._database = _database_of(self.settings.database_url)
        self._batcher: CallBatcher[_Submitted, Processed] = CallBatcher(
            self._run_pipeline,
            max_batch=self.settings.max_batch,
            concurrency=min(self.settings.batch_concurrency, self.settings.db_pool_size),
            shared_fault=_shared_by_the_batch,
        )
        self._published: GroupCommit[uuid.UUID] = GroupCommit(
            self.outbox.mark_published, linger_s=_MARK_LINGER_S
        )

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        return self._consuming and not self.stopping

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        """Consumes until `stop()`, reconnecting whenever the broker goes away."""
        self._say_whom_it_trusts()
        backoff = 0.2
        sweeper = asyncio.create_task(self._sweep_forever(), name="outbox-sweep")
        try:
            while not self._stopping.is_set():
                try:
                    connection = await self._broker_nodes.connect(
                        client_properties={"connection_name": "ltm-worker"}
                    )
                except (OSError, aiormq.exceptions.AMQPError) as error:
                    log.warning(
                        "broker unreachable",
                        url=mask_passwords(self.settings.amqp_url),
                        error=str(error),
                        retry_in_s=backoff,
                    )
                    await self._pause(backoff)
                    backoff = min(backoff * 2, _RECONNECT_MAX_S)
                    continue
                backoff = 0.2
                await self._serve(connection)
        finally:
            sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeper
            await self.store.close()
            log.info("worker stopped")

    def _say_whom_it_trusts(self) -> None:
        trusted = self.settings.trusted_publishers
        if trusted is None:
            log.warning(
                "every publisher's tool calls are accepted: LTM_TRUSTED_PUBLISHERS is not set"
            )
        else:
            log.info("tool calls are accepted from these broker users only", users=sorted(trusted))

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    async def _serve(self, connection: AbstractConnection) -> None:
        """One connection's life: set up, consume until it closes or we stop, then drain."""
        try:
            async with connection:
                setup = await connection.channel()
                await declare_topology(setup, self.topology)
                await setup.close()
                self._publisher = await EventPublisher.open(connection, self.topology)
                self._shard_queues = ShardQueues(
                    connection, self.topology, shard_count=self.settings.shard_count
                )
                channel = await connection.channel()
                # `closed()` only resolves on our own close; a broker-side close runs callbacks.
                # A channel the broker closes alone (an exchange deleted, an ack refused) would
                # leave the worker publishing or consuming on nothing: all starts over.
                lost = asyncio.Event()
                for closing in (connection, self._publisher.channel, channel):
                    closing.close_callbacks.add(lambda *_: lost.set())
                await channel.set_qos(prefetch_count=self.settings.prefetch)
                # Deliveries come straight from aiormq: aio-pika's IncomingMessage and its
                # second task per delivery are work the worker does not need.
                consuming = await channel.get_underlay_channel()
                queue = self.topology.worker_queue
                tag = (await consuming.basic_consume(queue, self._on_delivery)).consumer_tag
                assert tag is not None
                self._consuming = True
                log.info("consuming", queue=queue, prefetch=self.settings.prefetch)
                stopping = asyncio.create_task(self._stopping.wait())
                closed = asyncio.create_task(lost.wait())
                await asyncio.wait({stopping, closed}, return_when=asyncio.FIRST_COMPLETED)
                stopping.cancel()
                self._consuming = False
                if closed.done():
                    log.warning("broker connection lost; reconnecting")
                    return
                closed.cancel()
                await self._drain(consuming, tag)
                await self._batcher.close()
                await self._flush_outbox()
        except asyncio.CancelledError:
            if being_cancelled():
                raise
            await self._connection_failed("the broker connection stalled")
        except (TimeoutError, OSError, RuntimeError, aiormq.exceptions.AMQPError) as error:
            # RuntimeError: how aio-pika and aiormq refuse work on a channel already closed.
            await self._connection_failed(repr(error))

    async def _connection_failed(self, error: str) -> None:
        self._consuming = False
        log.warning("broker connection failed", error=error)
        await self._pause(0.2)

    async def _drain(self, consuming: aiormq.abc.AbstractChannel, tag: str) -> None:
        """Stops taking new calls, then lets those in flight finish within the grace period."""
        with contextlib.suppress(aiormq.exceptions.AMQPError, OSError, RuntimeError):
            await consuming.basic_cancel(tag)
        if self._in_flight:
            log.info("draining in-flight calls", count=len(self._in_flight))
            _, pending = await asyncio.wait(
                set(self._in_flight), timeout=self.settings.shutdown_grace_s
            )
            if pending:
                log.warning("in-flight calls left for redelivery", count=len(pending))

    # -- one delivery ----------------------------------------------------------------------

    async def _on_delivery(self, message: DeliveredMessage) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._in_flight.add(task)
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
                    queue=self.topology.worker_queue,
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
                    log.warning("not answered; leaving the call for redelivery", error=repr(error))
                    tracing.failed(span, type(error).__qualname__, "left for redelivery")
                    with contextlib.suppress(Exception):
                        await _settle(message, requeue=True)
        finally:
            self._in_flight.discard(task)

    async def _handle(self, message: DeliveredMessage, delivered_at: float) -> None:
        """`delivered_at`: `time.perf_counter()` when the delivery came, for the latencies."""
        refused = refusal(
            user_id=message.header.properties.user_id,
            size=len(message.body),
            trusted_publishers=self.settings.trusted_publishers,
            max_bytes=self.settings.max_message_bytes,
        )
        if refused is not None:
            await self._dead_letter(
                message,
                refused.reason,
                cause=refused.cause,
                delivered_at=delivered_at,
                read_body=False,
            )
            return
        try:
            call = decode_tool_call(message.body)
        except InvalidEnvelope as error:
            await self._dead_letter(
                message,
                f"invalid envelope: {error}",
                cause="invalid_envelope",
                delivered_at=delivered_at,
            )
            return
        # Bound until the delivery's task ends (each has a context of its own), so that the
        # caller's lines about this call carry its id too.
        structlog.contextvars.bind_contextvars(tool_call_id=call.tool_call_id)
        tool = pipeline_for(call.tool_name)
        if tool is None:
            await self._dead_letter(
                message,
                f"unsupported tool {call.tool_name!r}: no pipeline of this worker takes it",
                cause="unsupported_tool",
                delivered_at=delivered_at,
            )
            return
        try:
            processed = await self._batcher.submit(
                call.tool_call_id, _Submitted(call, tracing.current_span())
            )
        except Exception as error:
            database_away = is_transient(error)
            if database_away:
                log.error("database unavailable past the retry budget", error=repr(error))
                reason, cause = f"database unavailable: {error!r}", "db_error"
            else:
                log.exception("pipeline failed")
                reason, cause = f"internal error: {error!r}", "internal_error"
            await self._answer_unrecorded(
                call, tool.unrecorded(database_away=database_away), delivered_at
            )
            await self._dead_letter(message, reason, cause=cause, delivered_at=delivered_at)
            return
        await self._deliver(message, call, processed, delivered_at)

    async def _run_pipeline(self, submitted: list[_Submitted]) -> list[Processed]:
        """One transaction for the batch, retried as a whole on transient faults, bounded."""
        calls = [item.call for item in submitted]
        self.metrics.batch_size.observe(len(calls))
        # Each call's events keep the context of its own delivery, batched or not.
        traceparents = {
            item.call.tool_call_id: traceparent
            for item in submitted
            if (traceparent := tracing.traceparent_of(item.span)) is not None
        }
        # Rows of earlier calls that the broker has confirmed are marked in this commit,
        # instead of in a transaction of their own.
        marks = self._published.take()
        try:
            with tracing.transaction([item.span for item in submitted], database=self._database):
                processed = await self._committed(calls, marks, traceparents)
        except BaseException:
            if marks is not None:
                self._published.give_back(marks)
            raise
        if marks is not None:
            marks.flushed()
        return processed

    async def _committed(
        self,
        calls: list[ToolCallRequested],
        marks: TakenFlush[uuid.UUID] | None,
        traceparents: Mapping[str, str],
    ) -> list[Processed]:
        """The first attempt alone; the retry machinery is built only after a transient fault
        (most batches commit at once), and retries within the budget left."""
        started = time.monotonic()
        try:
            return await self._transaction(calls, marks, traceparents)
        except Exception as error:
            if not _retried(error, calls):
                raise
            self._count_retry(error, calls)
        return await self._retry(calls, marks, traceparents, started)

    async def _transaction(
        self,
        calls: list[ToolCallRequested],
        marks: TakenFlush[uuid.UUID] | None,
        traceparents: Mapping[str, str],
    ) -> list[Processed]:
        async with self.store.transaction(traceparents) as tx:
            if marks is not None:
                await tx.mark_published(marks.ids)
            return await process_tool_calls(
                calls,
                tx,
                max_memory_length=self.settings.max_memory_length,
                reply_ttl_ms=self._reply_ttl_ms,
                max_server_memories=self.settings.max_server_memories,
                max_personal_memories=self.settings.max_personal_memories,
            )

    async def _retry(
        self,
        calls: list[ToolCallRequested],
        marks: TakenFlush[uuid.UUID] | None,
        traceparents: Mapping[str, str],
        started: float,
    ) -> list[Processed]:
        """Attempts after a transient fault, until the retry budget counted from `started`.

        The first comes at once (a lost connection is replaced by then); later ones back off.
        """
        budget = max(0.0, self.settings.db_retry_seconds - (time.monotonic() - started))

        def count_retry(state: RetryCallState) -> None:
            outcome = state.outcome
            self._count_retry(outcome.exception() if outcome is not None else None, calls)

        retrying = AsyncRetrying(
            retry=retry_if_exception(lambda error: _retried(error, calls)),
            stop=stop_after_delay(budget),
            wait=wait_exponential_jitter(max=1.0, jitter=0.1, multiplier=0.05),
            before_sleep=count_retry,
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                return await self._transaction(calls, marks, traceparents)
        raise AssertionError("unreachable: tenacity reraises the last error")  # pragma: no cover

    def _count_retry(self, error: BaseException | None, calls: list[ToolCallRequested]) -> None:
        self.metrics.db_retries.inc()
        log.warning(
            "transient database fault; retrying",
            error=repr(error),
            batch=len(calls),
            tool_call_ids=[call.tool_call_id for call in calls],
        )

    async def _deliver(
        self,
        message: DeliveredMessage,
        call: ToolCallRequested,
        processed: Processed,
        delivered_at: float,
    ) -> None:
        """Publishes what committed, marks it, then acks; a failure leaves it to redelivery."""
        publisher, shard_queues = self._publisher, self._shard_queues
        assert publisher is not None and shard_queues is not None
        result = processed.result
        if processed.reused_id:
            log.warning(
                "tool_call_id already used for a different call; refused, nothing written",
                status=result.status.value,
            )
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
        self.metrics.latency.observe(time.perf_counter() - delivered_at)
        if processed.outbox:
            failpoints.reach("after_publish")
            try:
                await self._published.submit([row.event_id for row in processed.outbox])
            except Exception as error:
                log.warning("could not mark outbox rows published", error=repr(error))
            failpoints.reach("after_mark")
        await _settle(message)
        self.metrics.ack_latency.observe(time.perf_counter() - delivered_at)
        self.metrics.calls.labels(
            result.tool_name, result.status.value, str(processed.replayed).lower()
        ).inc()
        log.info(
            "tool call answered",
            status=result.status.value,
            replayed=processed.replayed,
            memory_id=result.data.memory_id,
        )

    async def _answer_unrecorded(
        self, call: ToolCallRequested, failure: Rejection, delivered_at: float
    ) -> None:
        """A result the database could not hold: sent directly, so the bot is not left waiting."""
        publisher, shard_queues = self._publisher, self._shard_queues
        assert publisher is not None and shard_queues is not None
        result = answer(call, failure.status, failure.message, failure.data)
        await shard_queues.ensure(result.shard_id)
        await publisher.publish_event(
            result, result_routing_key(call.context.shard_id), self._reply_ttl_ms
        )
        self.metrics.latency.observe(time.perf_counter() - delivered_at)
        self.metrics.calls.labels(call.tool_name, failure.status.value, "false").inc()

    async def _dead_letter(
        self,
        message: DeliveredMessage,
        reason: str,
        *,
        cause: str,
        delivered_at: float,
        read_body: bool = True,
    ) -> None:
        """`read_body` False: nothing of the body is parsed, not even for its ids."""
        publisher = self._publisher
        assert publisher is not None
        # The ids the copy carries (`ltm dlq list` shows them), not only those that came.
        ids = dead_letter_ids(message, read_body=read_body)
        log.warning(
            "dead-lettering",
            reason=reason,
            routing_key=message.routing_key,
            event_id=ids.event_id,
            tool_call_id=ids.tool_call_id,
        )
        tracing.failed(tracing.current_span(), cause, reason)
        await publisher.dead_letter(message, reason, event_id=ids.event_id)
        await _settle(message)
        self.metrics.ack_latency.observe(time.perf_counter() - delivered_at)
        self.metrics.dead_lettered.labels(cause).inc()

    # -- the outbox sweep ------------------------------------------------------------------

    async def _sweep_forever(self) -> None:
        purge_every = max(60.0, self.settings.outbox_sweep_interval_s)
        last_purge = time.monotonic()
        while True:
            await asyncio.sleep(self.settings.outbox_sweep_interval_s)
            try:
                await self._sweep(min_age_s=_SWEEP_MIN_AGE_S)
                self.metrics.outbox_backlog.set(await self.outbox.backlog())
                if time.monotonic() - last_purge > purge_every:
                    last_purge = time.monotonic()
                    await self.outbox.purge_published(age_s=self.settings.outbox_retention_s)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.warning("outbox sweep failed", error=repr(error))

    async def _sweep(self, *, min_age_s: float) -> int:
        """Publishes rows a crash or a lost broker left behind; returns how many it handled."""
        publisher, shard_queues = self._publisher, self._shard_queues
        if publisher is None or shard_queues is None or publisher.channel.is_closed:
            return 0
        handled = 0
        while True:
            async with self.outbox.unpublished(limit=_SWEEP_BATCH, min_age_s=min_age_s) as (
                rows,
                connection,
            ):
                if not rows:
                    return handled
                # An expired reply is stale news for the shard; it is dropped, not sent.
                live = [row for row in rows if row.ttl_ms is None or row.ttl_ms > 0]
                await _declare_shards_of(live, shard_queues)
                await publisher.publish_rows(live)
                await self.outbox.mark_published_in(connection, [row.event_id for row in rows])
            handled += len(rows)
            self.metrics.outbox_swept.inc(len(live))
            log.info("outbox rows swept", published=len(live), expired=len(rows) - len(live))

    async def _flush_outbox(self) -> None:
        try:
            await self._sweep(min_age_s=0)
        except Exception as error:
            log.warning("could not flush the outbox at shutdown", error=repr(error))


async def _declare_shards_of(rows: Sequence[OutboxRow], shard_queues: ShardQueues) -> None:
    """The queues of the shards these rows go to: after a restart, the sweep may be the first
    to send replies to a shard."""
    for row in rows:
        shard_id = shard_of_routing_key(row.routing_key)
        if shard_id is not None:
            with structlog.contextvars.bound_contextvars(tool_call_id=row.correlation_id):
                await shard_queues.ensure(shard_id)


async def _settle(message: DeliveredMessage, *, requeue: bool | None = None) -> None:
    """Acks, or with `requeue` nacks, without waiting for the socket to drain the frame."""
    tag = message.delivery_tag
    assert tag is not None
    with tracing.settling(
        "ack" if requeue is None else "nack", exchange=message.exchange, delivery_tag=tag
    ):
        if requeue is None:
            await message.channel.basic_ack(tag, wait=False)
        else:
            await message.channel.basic_nack(tag, requeue=requeue, wait=False)
