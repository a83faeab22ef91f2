"""`ConfirmingChannel` on the run's broker: a nacked publish makes it publish on a new channel
(the queue here refuses publishes once full, which nacks them deterministically), a channel
the broker closes is reported as lost, a renewed one not, and a burst of publishes goes to
the connection's writer at once."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import aiormq
import pytest
from aio_pika.abc import AbstractConnection, AbstractQueue

from harness.waiting import eventually
from infra.messaging import amqp
from infra.messaging.confirms import ConfirmingChannel
from infra.settings import Settings


@pytest.fixture
async def connection(settings: Settings) -> AsyncIterator[AbstractConnection]:
    connection = await amqp.connect(settings)
    async with connection:
        yield connection


@pytest.fixture
async def full_after_one(connection: AbstractConnection) -> AsyncIterator[AbstractQueue]:
    """A queue that holds one message and nacks every publish beyond it."""
    channel = await connection.channel()
    queue = await channel.declare_queue(
        f"confirms-{uuid.uuid4().hex[:8]}",
        auto_delete=False,
        arguments={"x-max-length": 1, "x-overflow": "reject-publish"},
    )
    yield queue
    await queue.delete(if_unused=False, if_empty=False)
    await channel.close()


async def _publish(confirming: ConfirmingChannel, queue: str, body: bytes) -> None:
    raw = confirming.raw
    try:
        await raw.basic_publish(body, exchange="", routing_key=queue, wait=False)
    except aiormq.exceptions.DeliveryError:
        confirming.refused(raw)
        raise


async def test_a_nacked_publish_moves_the_next_ones_to_a_new_channel(
    connection: AbstractConnection, full_after_one: AbstractQueue
) -> None:
    lost: list[bool] = []
    confirming = await ConfirmingChannel.open(
        connection, on_lost=lambda: lost.append(True), renew_every_s=0.05
    )
    first = confirming.channel
    await _publish(confirming, full_after_one.name, b"fits")
    with pytest.raises(aiormq.exceptions.DeliveryError):
        await _publish(confirming, full_after_one.name, b"refused")

    async def renewed() -> bool:
        return confirming.renewals == 1

    await eventually(renewed, timeout=10, what="a new channel")
    assert confirming.channel is not first

    async def retired() -> bool:
        return first.is_closed

    await eventually(retired, timeout=10, what="the refused channel closed")
    await full_after_one.purge()
    await _publish(confirming, full_after_one.name, b"on the new channel")
    assert (await full_after_one.declare()).message_count == 1
    # Renewing is not losing: the holder keeps publishing, it does not start over.
    assert lost == []
    await confirming.close()
    assert confirming.channel.is_closed and lost == []


async def test_a_nack_on_a_channel_already_replaced_or_being_replaced_renews_nothing_more(
    connection: AbstractConnection,
) -> None:
    confirming = await ConfirmingChannel.open(connection, renew_every_s=0.05)
    first = confirming.channel
    assert confirming.refused(first)
    assert not confirming.refused(first)  # the many nacks of one burst: one new channel
    await eventually(lambda: _count(confirming, 1), timeout=10, what="the first renewal")
    assert not confirming.refused(first)  # a late nack from the retired channel
    assert confirming.refused(confirming.channel)
    await eventually(lambda: _count(confirming, 2), timeout=10, what="the second renewal")
    await confirming.close()
    assert not confirming.refused(confirming.channel)  # closed: nothing renews any more


async def _count(confirming: ConfirmingChannel, renewals: int) -> bool:
    return confirming.renewals == renewals


async def test_a_channel_the_broker_closes_is_lost(connection: AbstractConnection) -> None:
    lost: list[bool] = []
    confirming = await ConfirmingChannel.open(connection, on_lost=lambda: lost.append(True))
    # Publishing to an exchange that does not exist: the broker closes the channel (404).
    exchange = f"missing-{uuid.uuid4().hex[:8]}"
    with pytest.raises(aiormq.exceptions.AMQPError):
        await confirming.raw.basic_publish(b"x", exchange=exchange, routing_key="x")

    async def reported() -> bool:
        return lost == [True]

    await eventually(reported, timeout=10, what="the channel reported lost")
    await confirming.close()


async def test_a_burst_of_publishes_reaches_the_writer_in_one_turn(
    connection: AbstractConnection,
) -> None:
    """A batch's events, published at once, are all queued for the connection's writer before
    it runs: none waits for it to write the ones before (aiormq's own buffer holds ten)."""
    burst = 200
    assert burst < amqp.FRAME_BUFFER
    confirming = await ConfirmingChannel.open(connection)
    channel = await connection.channel()
    queue = await channel.declare_queue(f"burst-{uuid.uuid4().hex[:8]}", exclusive=True)
    raw = confirming.raw
    publishes = [
        asyncio.create_task(
            raw.basic_publish(b"x", exchange="", routing_key=queue.name, wait=False)
        )
        for _ in range(burst)
    ]
    await asyncio.sleep(0)  # one turn: each publish runs until it waits
    queued = raw.delivery_tag
    await asyncio.gather(*publishes)
    assert queued == burst
    counted = await channel.declare_queue(queue.name, passive=True)
    assert counted.declaration_result.message_count == burst
    await confirming.close()
