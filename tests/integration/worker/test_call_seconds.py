"""What `ltm_tool_call_seconds` measures: delivery to the result published, what a user waits
for; the ack, which waits for the outbox rows to be marked (lingering to share that UPDATE),
has a histogram of its own. A worker in this process, on the real broker and database."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncEngine

from contracts import ToolCallCompleted
from harness.broker import own_topology, publish_tool_call, tap_events
from harness.snowflake import snowflake
from harness.waiting import eventually
from harness.world import World, tool_call
from infra.settings import Settings
from infra.storage.engine import create_engine
from ltm.composition import build_worker
from worker.adapters.metrics import WorkerMetrics
from worker.adapters.outbox import OutboxStore


class HeldMarks(OutboxStore):
    """The real outbox, whose marking of published rows waits until the test lets it go: the
    ack waits behind it, while the result is out already."""

    def __init__(self, engine: AsyncEngine) -> None:
        super().__init__(engine)
        self.released = asyncio.Event()

    async def mark_published(self, event_ids: Sequence[uuid.UUID]) -> None:
        await self.released.wait()
        await super().mark_published(event_ids)


async def test_call_seconds_end_at_the_published_result_and_ack_seconds_at_the_ack(
    settings: Settings, world: World
) -> None:
    server = await world.server()
    persona = await world.persona(server)
    memory_id = await world.server_memory(persona, "likes tea")
    call = tool_call(
        persona, {"memory_id": memory_id, "memory_content": "likes cocoa"}, triggerer_id=snowflake()
    )
    async with own_topology(settings, "seconds") as (own, topology, channel):
        outbox = HeldMarks(create_engine(own.sqlalchemy_url, pool_size=2))
        metrics = WorkerMetrics()
        worker = build_worker(own, metrics, outbox=outbox)
        registry = metrics.registry

        def count(histogram: str) -> float | None:
            return registry.get_sample_value(f"{histogram}_count")

        async def observed(histogram: str) -> bool:
            return count(histogram) == 1

        async def ready() -> bool:
            return worker.ready

        running = asyncio.create_task(worker.run())
        try:
            await eventually(ready, what="the worker consuming")
            async with tap_events(channel, topology.events_exchange, ["result.#"]) as tap:
                await publish_tool_call(channel, topology, call)
                await tap.wait_for(ToolCallCompleted, tool_call_id=call.tool_call_id)
            await eventually(
                lambda: observed("ltm_tool_call_seconds"), what="the call's seconds observed"
            )
            assert count("ltm_tool_call_ack_seconds") == 0, "the marks, and so the ack, are held"
            outbox.released.set()
            await eventually(
                lambda: observed("ltm_tool_call_ack_seconds"), what="the ack's seconds observed"
            )
            assert count("ltm_tool_call_seconds") == 1
        finally:
            outbox.released.set()
            worker.stop()
            await running
            await outbox.engine.dispose()
            await channel.queue_delete(topology.shard_queue(call.context.shard_id))
