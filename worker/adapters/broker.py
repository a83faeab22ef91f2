"""RabbitMQ: publishing events with confirms, dead-lettering with a reason, and declaring the
queue of a shard before its first reply.

Every publish here waits for the broker's confirm; callers run publishes concurrently, so
that many confirms are outstanding at once instead of one round trip at a time.

Events go out through aio-pika's underlying aiormq channel with `wait=False`: aio-pika's
`Exchange.publish` holds the channel's lock until the socket has drained each message, which
queues every publish of the worker behind the one before it, one event-loop turn at a time.
Here the lock covers only queueing the frames; the confirm is still awaited.

While tracing is on, the events a call publishes carry its span's context, and any other
publish is a PRODUCER span whose context travels in the message's headers: a row published
late is the child of the call that wrote it (its stored `traceparent`), a dead-letter copy
the child of the delivery being given up on.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

import aio_pika
import aiormq
import orjson
from aio_pika.abc import AbstractChannel
from aiormq.abc import DeliveredMessage
from pamqp.commands import Basic
from pamqp.common import FieldTable

from contracts import (
    CONTENT_TYPE,
    REPLAYED_HEADER,
    Event,
    Topology,
    encode_event,
    rfc3339_utc,
    schema_version_of,
    utc_now,
)
from contracts.dead_letters import (
    ATTEMPTS_HEADER,
    ERROR_HEADER,
    FAILED_AT_HEADER,
    ORIGINAL_USER_ID_HEADER,
)
from infra.cancellation import being_cancelled
from infra.messaging.confirms import ConfirmingChannel
from infra.messaging.topology import declare_shard_queue
from infra.observability import tracing
from infra.observability.logs import error_summary, get_logger
from worker.core.outgoing import OutboxRow

__all__ = [
    "ATTEMPTS_HEADER",
    "ERROR_HEADER",
    "FAILED_AT_HEADER",
    "DeadLetterIds",
    "EventPublisher",
    "ShardQueues",
    "dead_letter_ids",
    "event_properties",
]

_MAX_REASON = 1000
# How long a refused publish is sent again on new channels (`infra.messaging.confirms`) before the
# call goes back to the queue: longer than a quorum queue's election on a busy machine, and far
# shorter than a call's five deliveries would last if each were refused at once.
REFUSED_RETRY_S: Final = 10.0

log = get_logger("ltm.worker")


class EventPublisher:
    """Publishes on a channel with publisher confirms, a new one after a refused publish
    (`infra.messaging.confirms`)."""

    def __init__(
        self,
        confirming: ConfirmingChannel,
        topology: Topology,
        *,
        refused_retry_s: float = REFUSED_RETRY_S,
    ) -> None:
        self._confirming = confirming
        self._events = topology.events_exchange
        self._dead_letter = topology.dead_letter_exchange
        self.refused_retry_s = refused_retry_s

    @classmethod
    async def open(
        cls,
        connection: aio_pika.abc.AbstractConnection,
        topology: Topology,
        *,
        on_lost: Callable[[], object] | None = None,
        refused_retry_s: float = REFUSED_RETRY_S,
    ) -> EventPublisher:
        """`on_lost`: called when the broker closes the channel (not when one is renewed).
        `refused_retry_s`: how long a refused publish is sent again before it fails."""
        confirming = await ConfirmingChannel.open(connection, on_lost=on_lost)
        return cls(confirming, topology, refused_retry_s=refused_retry_s)

    @property
    def closed(self) -> bool:
        """Whether its channel is gone (the connection is being replaced)."""
        return self._confirming.channel.is_closed

    @property
    def renewals(self) -> int:
        """Channels opened after a refused publish, so far."""
        return self._confirming.renewals

    async def publish_row(self, row: OutboxRow) -> None:
        """Raises `aiormq.exceptions.DeliveryError` if the broker refuses it (nack). Its
        span's parent is the row's stored context: the call that wrote it."""
        await self._publish(
            self._events,
            row.body,
            row.routing_key,
            _row_properties(row),
            parent=row.traceparent,
        )

    async def publish_rows(self, rows: Sequence[OutboxRow], *, in_call: bool = False) -> None:
        """All at once, each confirmed; raises if any was not.

        `in_call`: published within the span of the call that wrote the rows, whose context
        they carry (the rows' stored context is that call's, not read again)."""
        if not in_call:
            await asyncio.gather(*(self.publish_row(row) for row in rows))
            return
        sent = [(row, _row_properties(row)) for row in rows]
        tracing.carrying_current(_headers_of(properties) for _, properties in sent)
        await asyncio.gather(
            *(
                self._confirmed(self._events, row.body, row.routing_key, properties)
                for row, properties in sent
            )
        )

    async def publish_event(
        self, event: Event, routing_key: str, ttl_ms: int | None, *, replayed: bool = False
    ) -> None:
        """Straight to the broker, for what the database could not hold (or holds already:
        `replayed`, an answer repeated from the idempotency record)."""
        properties = event_properties(
            str(event.event_id), event.event_type, event.correlation_id, ttl_ms, replayed=replayed
        )
        await self._publish(self._events, encode_event(event), routing_key, properties)

    async def dead_letter(self, message: DeliveredMessage, reason: str, *, event_id: str) -> None:
        """Republishes the delivery as it came, with why and when, to the dead-letter exchange.

        `event_id` becomes its message_id (`dead_letter_ids`): the one the caller logs.
        The caller acks the delivery after this returns: the copy is confirmed by then.
        """
        came = message.header.properties
        headers = dict(came.headers or {})
        headers[ERROR_HEADER] = reason[:_MAX_REASON]
        headers[FAILED_AT_HEADER] = rfc3339_utc(utc_now())
        # Quorum queues count earlier deliveries; the copy keeps the total, since the
        # dead-letter queue's own count grows each time an operator lists it.
        previous = headers.get("x-delivery-count")
        headers[ATTEMPTS_HEADER] = (previous if isinstance(previous, int) else 0) + 1
        # The broker refuses a user_id other than this connection's user: the publisher's
        # is kept in a header instead (the first one, if the call was replayed before).
        if came.user_id and ORIGINAL_USER_ID_HEADER not in headers:
            headers[ORIGINAL_USER_ID_HEADER] = came.user_id
        properties = Basic.Properties(
            content_type=came.content_type,
            content_encoding=came.content_encoding,
            headers=headers,
            delivery_mode=2,
            priority=came.priority,
            correlation_id=came.correlation_id,
            reply_to=came.reply_to,
            message_id=event_id,
            timestamp=came.timestamp,
            message_type=came.message_type,
            app_id=came.app_id,
        )
        await self._publish(self._dead_letter, message.body, message.routing_key or "", properties)

    async def _publish(
        self,
        exchange: str,
        body: bytes,
        routing_key: str,
        properties: Basic.Properties,
        *,
        parent: tracing.Parent = tracing.CURRENT,
    ) -> None:
        """`parent`: where the message was made (the current span, or an outbox row's)."""
        with tracing.sending(
            exchange=exchange,
            routing_key=routing_key,
            message_id=properties.message_id,
            conversation_id=properties.correlation_id,
            headers=_headers_of(properties),
            parent=parent,
        ):
            await self._confirmed(exchange, body, routing_key, properties)

    async def _confirmed(
        self, exchange: str, body: bytes, routing_key: str, properties: Basic.Properties
    ) -> None:
        """Published, and confirmed by the broker; raises if it was not."""
        try:
            await self._confirming.confirmed(
                lambda _, raw: raw.basic_publish(
                    body,
                    exchange=exchange,
                    routing_key=routing_key,
                    properties=properties,
                    mandatory=False,
                    wait=False,
                ),
                within_s=self.refused_retry_s,
            )
        except asyncio.CancelledError:
            if being_cancelled():
                raise
            # The connection was given up as stalled: a failed publish, as any lost
            # connection.
            raise aiormq.exceptions.AMQPConnectionError("the broker connection stalled") from None


def _row_properties(row: OutboxRow) -> Basic.Properties:
    return event_properties(str(row.event_id), row.event_type, row.correlation_id, row.ttl_ms)


def _headers_of(properties: Basic.Properties) -> FieldTable:
    """The message's headers, made empty when it has none, for the trace context to go in."""
    if properties.headers is None:
        properties.headers = {}
    return properties.headers


@dataclass(frozen=True, slots=True)
class DeadLetterIds:
    """What names a dead-lettered delivery, in its copy and in the log line about it."""

    event_id: str
    tool_call_id: str | None


def dead_letter_ids(message: DeliveredMessage, *, read_body: bool = True) -> DeadLetterIds:
    """The delivery's message_id, else the body's `event_id`, else a new one; its
    correlation_id, else the body's `tool_call_id`. The body is read leniently: a message
    dead-lettered for being no valid envelope often still says which call it was. (Without
    an id of ours, aiormq would make one up on publishing, which no log line would show.)
    `read_body` False: the properties only (a body too large, or an untrusted publisher's,
    is never parsed).
    """
    properties = message.header.properties
    event_id, tool_call_id = properties.message_id, properties.correlation_id
    if read_body and not (event_id and tool_call_id):
        body = _json_object(message.body)
        event_id = event_id or _text(body.get("event_id"))
        tool_call_id = tool_call_id or _text(body.get("tool_call_id"))
    return DeadLetterIds(event_id or str(uuid.uuid4()), tool_call_id)


def _json_object(body: bytes) -> dict[str, object]:
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


class ShardQueues:
    """Declares a shard's queue the first time this connection sends it a reply.

    `ltm topology` declares shards 0..LTM_SHARD_COUNT-1 only: the replies of any other shard
    would match no binding and be dropped by the broker. Declared, they wait in its queue
    (for their TTL) until a gateway takes the shard. One instance per connection, so that a
    queue deleted meanwhile is declared again after a reconnect.
    """

    def __init__(
        self, connection: aio_pika.abc.AbstractConnection, topology: Topology, *, shard_count: int
    ) -> None:
        self._connection = connection
        self._topology = topology
        self._shard_count = shard_count
        self._declared: set[int] = set()
        # Declarations are rare (once per shard); one at a time keeps them simple.
        self._lock = asyncio.Lock()
        self._channel: AbstractChannel | None = None

    async def ensure(self, shard_id: int) -> None:
        """Returns once the shard's queue is declared; at once when it was already."""
        if shard_id in self._declared:
            return
        async with self._lock:
            if shard_id not in self._declared:
                await self._declare(shard_id)
                self._declared.add(shard_id)

    async def _declare(self, shard_id: int) -> None:
        queue = self._topology.shard_queue(shard_id)
        # A channel of its own: a refused declaration closes it, not the publisher's channel.
        if self._channel is None or self._channel.is_closed:
            self._channel = await self._connection.channel()
        try:
            # Bound to the exchange as the connection's start declared it, not declared again:
            # one deleted meanwhile must fail the publish and make the worker start over.
            await declare_shard_queue(self._channel, self._topology, shard_id)
        except aiormq.exceptions.ChannelClosed as error:
            # Declared otherwise by someone else (other arguments), or not ours to declare:
            # the replies go where the broker's bindings send them, as they would have.
            log.warning(
                "worker.shard_queue_declare_failed",
                queue=queue,
                shard_id=shard_id,
                error=error_summary(error),
            )
            return
        if shard_id >= self._shard_count:
            log.warning(
                # Its queue is declared all the same: the replies wait there for a gateway.
                "worker.shard_beyond_shard_count",
                queue=queue,
                shard_id=shard_id,
                shard_count=self._shard_count,
                setting="LTM_SHARD_COUNT",
            )
        else:
            log.info("worker.shard_queue_declared", queue=queue, shard_id=shard_id)


def event_properties(
    event_id: str,
    event_type: str,
    correlation_id: str | None,
    ttl_ms: int | None,
    *,
    replayed: bool = False,
) -> Basic.Properties:
    """The basic properties of an event (docs/contract.md), time to live included; `replayed`
    marks an answer repeated from the idempotency record."""
    headers: FieldTable = {"schema_version": schema_version_of(event_type)}
    if replayed:
        headers[REPLAYED_HEADER] = True
    return Basic.Properties(
        content_type=CONTENT_TYPE,
        delivery_mode=2,
        message_id=event_id,
        correlation_id=correlation_id,
        message_type=event_type,
        timestamp=utc_now(),
        headers=headers,
        # Milliseconds, as a string; the broker wants at least one.
        expiration=None if ttl_ms is None else str(max(ttl_ms, 1)),
    )
