"""`open_stream` on the real broker's audit stream: what every reading of it (the tail, the
console's audit page, the erasures' replay) is handed."""

from __future__ import annotations

from datetime import timedelta

from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractIncomingMessage

from contracts import Topology, utc_now
from harness.waiting import eventually
from operators.audit_stream import AuditDelivery, open_stream
from tests.integration.operators.seeding import clock_passes, memory_updated, publish_event


async def test_a_stream_from_a_time_begins_at_the_first_event_at_or_after_it(
    connection: AbstractConnection, channel: AbstractChannel, topology: Topology
) -> None:
    # Sought a minute early, from a chunk's start: these come back from the broker.
    for name in ("early1", "early2"):
        await publish_event(channel, topology, memory_updated(f"tc-{name}", 1))
    boundary = utc_now()
    await clock_passes(boundary + timedelta(milliseconds=5))
    later = [memory_updated(f"tc-{name}", 2) for name in ("late1", "late2")]
    for event in later:
        await publish_event(channel, topology, event)

    received: list[AbstractIncomingMessage] = []
    async with open_stream(connection, topology, boundary) as (deliveries, _):

        async def both_later_came() -> bool:
            while not deliveries.empty():
                message = deliveries.get_nowait()
                received.append(message)
                await message.ack()
            return len(received) >= len(later)

        await eventually(both_later_came, timeout=10, what="the later events")

    shown = [AuditDelivery.of(message).event for message in received]
    assert [event.correlation_id for event in shown if event is not None] == [
        event.tool_call_id for event in later
    ]
