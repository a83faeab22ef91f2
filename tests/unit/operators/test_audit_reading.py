"""`read_audit`'s batches: what has arrived is shown at once, so that the texts of its changes
come from one query, not one per event."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, cast

from aio_pika.abc import AbstractIncomingMessage

from contracts import encode_event
from operators.audit_reading import _Reading
from operators.audit_stream import AuditDelivery
from tests.integration.operators.seeding import memory_updated


class _Message:
    """What the reading uses of a stream delivery."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.timestamp = datetime.now(UTC)
        self.headers: dict[str, Any] = {}
        self.acked = False

    async def ack(self) -> None:
        self.acked = True


async def test_what_arrived_together_is_shown_in_one_batch_then_each_later_one() -> None:
    deliveries: asyncio.Queue[AbstractIncomingMessage] = asyncio.Queue()
    messages = [_Message(encode_event(memory_updated(f"tc-{n}", n))) for n in range(5)]
    for message in messages:
        deliveries.put_nowait(cast(AbstractIncomingMessage, message))
    # Made before the reading begins: without follow, a newer event ends the window.
    later = _Message(encode_event(memory_updated("tc-later", 9)))
    batches: list[list[str]] = []
    stop = asyncio.Event()

    async def show(batch: Sequence[AuditDelivery]) -> None:
        batches.append([str(d.event.correlation_id) for d in batch if d.event is not None])
        if len(batches) == 1:
            deliveries.put_nowait(cast(AbstractIncomingMessage, later))

    reading = _Reading("first", False, stop, 0.2, show)
    await asyncio.wait_for(reading.run(deliveries, holds_events=True), 15)

    assert batches == [[f"tc-{n}" for n in range(5)], ["tc-later"]]
    assert all(message.acked for message in messages)
