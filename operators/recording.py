"""Events an operator's action commits to the outbox, then publishes: the audit record of a
restore, a replay or a purge.

Committed first, so that nothing is lost: when publishing fails, the outbox sweep of any
running worker publishes the rows later (and the caller hears of the failure).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncEngine

from infra.messaging import amqp
from infra.settings import Settings
from operators.engines import one_shot_engine
from worker.adapters.broker import EventPublisher
from worker.adapters.outbox import OutboxStore, queue_events
from worker.core.outgoing import OutboxRow, OutgoingEvent

__all__ = ["publish_queued", "record_events"]


async def publish_queued(
    settings: Settings, engine: AsyncEngine, rows: Sequence[OutboxRow]
) -> None:
    """Publishes rows the caller committed to the outbox, with confirms, then marks them."""
    connection = await amqp.connect(settings)
    async with connection:
        publisher = await EventPublisher.open(connection, settings.topology)
        await publisher.publish_rows(rows)
    await OutboxStore(engine).mark_published([row.event_id for row in rows])


async def record_events(settings: Settings, events: Sequence[OutgoingEvent]) -> None:
    """Commits `events` to the outbox in a transaction of their own, then publishes them."""
    async with one_shot_engine(settings) as engine:
        async with engine.begin() as connection:
            rows = await queue_events(connection, events)
        await publish_queued(settings, engine, rows)
