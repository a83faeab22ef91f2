"""The worker's event publisher on the run's broker: an event the broker refuses is sent again
on a new channel until it is confirmed, within the call's delivery (not given back to the
queue at once, where a call's five deliveries would be spent in milliseconds)."""

from __future__ import annotations

import asyncio
import uuid

import aiormq
import pytest
from aio_pika.abc import AbstractChannel, AbstractQueue

from contracts import Topology, result_routing_key
from harness.broker import own_topology, queue_events
from harness.waiting import eventually
from infra.messaging import amqp
from infra.messaging.topology import declare_shard_queue
from infra.settings import Settings
from tests.integration.gateway.conftest import tool_call_completed
from worker.adapters.broker import EventPublisher

SHARD = 3


async def _refusing(channel: AbstractChannel, topology: Topology) -> AbstractQueue:
    """A second queue the shard's results are routed to, which takes none: the broker nacks
    every result while it is there."""
    events = await channel.get_exchange(topology.events_exchange)
    refusing = await channel.declare_queue(
        f"refusing-{uuid.uuid4().hex[:8]}",
        exclusive=True,
        arguments={"x-max-length": 0, "x-overflow": "reject-publish"},
    )
    await refusing.bind(events, routing_key=result_routing_key(SHARD))
    return refusing


async def test_a_refused_event_goes_again_on_a_new_channel_until_confirmed(
    settings: Settings,
) -> None:
    async with own_topology(settings, "publisher") as (own, topology, channel):
        shard_queue = await declare_shard_queue(channel, topology, SHARD)
        refusing = await _refusing(channel, topology)
        connection = await amqp.connect(own)
        async with connection, queue_events(shard_queue) as shard:
            publisher = await EventPublisher.open(connection, topology)
            event = tool_call_completed(f"call-{uuid.uuid4()}", SHARD)
            publishing = asyncio.create_task(
                publisher.publish_event(event, result_routing_key(SHARD), ttl_ms=None)
            )

            async def renewed() -> bool:
                return publisher.renewals >= 1

            await eventually(renewed, timeout=10, what="a new channel after the nack")
            assert not publishing.done()  # still trying, not failed back to the caller
            await refusing.delete(if_unused=False, if_empty=False)
            await asyncio.wait_for(publishing, 15)
            await shard.wait_for_delivery(message_id=str(event.event_id))


async def test_an_event_refused_for_longer_fails_once_its_time_is_over(
    settings: Settings,
) -> None:
    async with own_topology(settings, "publisher") as (own, topology, channel):
        await declare_shard_queue(channel, topology, SHARD)
        refusing = await _refusing(channel, topology)
        connection = await amqp.connect(own)
        async with connection:
            publisher = await EventPublisher.open(connection, topology, refused_retry_s=1.5)
            event = tool_call_completed(f"call-{uuid.uuid4()}", SHARD)
            with pytest.raises(aiormq.exceptions.DeliveryError):
                await publisher.publish_event(event, result_routing_key(SHARD), ttl_ms=None)
            assert publisher.renewals >= 2  # a new channel each time, paced
        await refusing.delete(if_unused=False, if_empty=False)
