"""A worker whose database URL names a primary and its synchronous standby: the primary is
killed while calls flow and the standby promoted; calls in flight retry and are answered,
each applied once. A standby refusing a write is a fault the retries cover."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aio_pika
import psycopg
import pytest
from aio_pika.abc import AbstractChannel

from contracts import MemoryStatus, ToolCallCompleted, ToolCallRequested, Topology
from harness.broker import publish_tool_call, tap_events
from harness.localnodes import PostgresPair
from harness.localnodes.running import started_pair
from harness.processes import LtmProcess
from harness.services import TestServices
from harness.world import World
from infra.settings import Settings
from infra.storage.database import migrate
from tests.support.failover import answered, new_prefix
from tests.support.failover import updates_of_new_memories as updates
from worker.runtime import is_transient_database_fault

pytestmark = [pytest.mark.localnodes, pytest.mark.timeout(300)]


@pytest.mark.usefixtures("machine_services")
async def test_calls_in_flight_when_the_primary_dies_are_answered_once_after_promotion(
    services: TestServices, settings: Settings, tmp_path: Path
) -> None:
    prefix = new_prefix("db-failover")
    topology = Topology(prefix)
    with started_pair() as pair:
        # Both hosts, libpq's failover: connections go to the one that takes writes.
        url = pair.url("ltm_failover")
        await asyncio.to_thread(migrate, url)
        world = World(url)
        persona = await world.persona(await world.server())
        before, during = await updates(world, persona, 20), await updates(world, persona, 40)
        calls = [call for _, call in before + during]
        env = {
            "LTM_DATABASE_URL": url,
            "LTM_AMQP_PREFIX": prefix,
            "LTM_DB_RETRY_SECONDS": "30",
            "LTM_PREFETCH": "8",  # calls queued at the broker, not all in one transaction
            "LTM_MAX_BATCH": "4",
        }
        with LtmProcess(services, ("worker",), tmp_path / "worker.log", env=env) as worker:
            await worker.wait_ready_async(timeout=60)
            async with await aio_pika.connect(settings.amqp_url) as connection:
                channel = await connection.channel(publisher_confirms=True)
                async with tap_events(channel, topology.events_exchange) as tap:
                    for _, call in before:
                        await publish_tool_call(channel, topology, call)
                    await tap.wait_until(
                        lambda t: answered(t, [c for _, c in before]), timeout=30, what="before"
                    )

                    # Calls keep coming, a few a tenth of a second, through the failover.
                    flow = asyncio.create_task(_publish_paced(channel, topology, during))
                    await tap.wait_until(
                        lambda t: answered(t, [c for _, c in during[:5]]), timeout=30, what="flow"
                    )
                    await asyncio.to_thread(pair.kill_primary)
                    await asyncio.to_thread(pair.promote_standby)
                    await flow

                    await tap.wait_until(
                        lambda t: answered(t, calls), timeout=120, what="every call answered"
                    )
                    statuses = {event.status for event in tap.events(ToolCallCompleted)}
                    assert statuses == {MemoryStatus.UPDATED}, worker.output()[-3000:]
                    # Calls met the dead primary, and were retried.
                    assert "worker.db_retrying" in worker.output()
        for memory_id, call in before + during:
            assert len(await world.revisions_of_call(call.tool_call_id)) == 1
            assert await world.content(memory_id) == call.arguments["memory_content"]  # type: ignore[index,call-overload]


async def _publish_paced(
    channel: AbstractChannel, topology: Topology, pairs: list[tuple[int, ToolCallRequested]]
) -> None:
    for _, call in pairs:
        await publish_tool_call(channel, topology, call)
        await asyncio.sleep(0.02)


async def test_a_write_on_a_standby_not_yet_promoted_is_a_transient_fault(
    postgres_pair: PostgresPair,
) -> None:
    assert postgres_pair.standby is not None
    standby = await psycopg.AsyncConnection.connect(
        postgres_pair.standby.conninfo(), autocommit=True
    )
    async with standby:
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction) as raised:
            await standby.execute("CREATE TABLE failover_probe (id int)")
    assert is_transient_database_fault(raised.value)
