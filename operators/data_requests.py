"""Asking for a data request and waiting for its answer: the use case behind the console's
Data requests page and the operators' commands (`ltm user export|forget`, `ltm server
forget`).

`request_data(settings, request)` publishes a `data_request.requested` to the tool-call
exchange (routing key `data_request`, `mandatory`, with publisher confirms, the broker user
set as the bot's tool client sets it) and returns its `data_request.completed`, read from a
private copy of the results of the request's shard, as `ltm call` reads a tool call's. An
operator's request (`operator_request`) names shard 0 and no channel (`"0"`): a gateway of
that shard finds no one waiting for the answer and drops it.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Final

import aio_pika
import aiormq

from contracts import (
    DATA_REQUEST_ROUTING_KEY,
    DataRequestCompleted,
    DataRequestRequested,
    RequestContext,
    RequestedBy,
    Subject,
    amqp_properties,
    decode_event,
    encode_event,
    result_routing_key,
)
from contracts.data_requests import RequestKind
from infra.messaging import amqp
from infra.settings import Settings
from operators.tool_call import Unroutable

__all__ = ["OPERATOR_CONTEXT", "operator_request", "request_data"]

# Where an operator's answer comes back: shard 0's results, about no channel.
OPERATOR_CONTEXT: Final = RequestContext(shard_id=0, channel_id="0")
# An erasure rewrites every store of its subject; an export reads them.
DEFAULT_TIMEOUT_S: Final = 60.0


def operator_request(
    kind: RequestKind,
    subject: Subject,
    operator: str,
    *,
    strict: bool = False,
    keep_learning: bool = False,
) -> DataRequestRequested:
    """A request of an operator (`operator`: `cli:<login>` or `console:<name>`)."""
    return DataRequestRequested(
        request_id=f"operator-{uuid.uuid4()}",
        kind=kind,
        subject=subject,
        requested_by=RequestedBy(kind="operator", id=operator),
        strict=strict,
        keep_learning=keep_learning,
        context=OPERATOR_CONTEXT,
    )


async def request_data(
    settings: Settings, request: DataRequestRequested, *, timeout: float = DEFAULT_TIMEOUT_S
) -> DataRequestCompleted:
    """Publishes `request` (which names a context: the answer goes there) and returns its
    answer. Raises `Unroutable` when no queue takes data requests, `ChannelNotFoundEntity`
    without the topology, `TimeoutError` when no answer came within `timeout` seconds."""
    if request.context is None:
        raise ValueError("a request without a context is never answered")
    topology = settings.topology
    connection = await amqp.connect(settings)
    async with connection:
        channel = await connection.channel(publisher_confirms=True)
        events = await channel.get_exchange(topology.events_exchange, ensure=True)
        # Named among the bots' queues (their broker account may declare those), exclusive.
        replies = await channel.declare_queue(
            topology.call_queue(uuid.uuid4().hex), exclusive=True, auto_delete=True
        )
        await replies.bind(events, routing_key=result_routing_key(request.context.shard_id))
        answered: asyncio.Future[DataRequestCompleted] = asyncio.get_running_loop().create_future()

        async def on_reply(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            async with message.process():
                if message.correlation_id != request.request_id:
                    return
                event = decode_event(message.body)
                if isinstance(event, DataRequestCompleted) and not answered.done():
                    answered.set_result(event)

        await replies.consume(on_reply)
        tool_calls = await channel.get_exchange(topology.tool_calls_exchange, ensure=True)
        confirmation = await tool_calls.publish(
            aio_pika.Message(
                encode_event(request), **amqp_properties(request), user_id=settings.amqp_user
            ),
            routing_key=DATA_REQUEST_ROUTING_KEY,
            mandatory=True,
        )
        if not isinstance(confirmation, aiormq.spec.Basic.Ack):
            raise Unroutable()
        return await asyncio.wait_for(answered, timeout)
