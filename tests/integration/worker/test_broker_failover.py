"""A worker given every node of a cluster (a dead one first): it connects to one that answers,
and when that node is killed while calls flow, it goes on on another; every call is answered
and applied once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aio_pika
import pytest

from contracts import MemoryStatus, ToolCallCompleted, Topology
from infra.localnodes import RabbitCluster
from infra.settings import Settings
from tests.support.broker import publish_tool_call, tap_events
from tests.support.failover import answered, cluster_env, new_prefix, node_of
from tests.support.failover import updates_of_new_memories as updates
from tests.support.processes import LtmProcess
from tests.support.services import TestServices
from tests.support.waiting import eventually
from tests.support.world import World

pytestmark = [pytest.mark.localnodes, pytest.mark.timeout(300)]


async def test_the_worker_fails_over_to_another_node_and_answers_every_call(
    rabbit_cluster: RabbitCluster, services: TestServices, settings: Settings, tmp_path: Path
) -> None:
    world = World(settings.database_url)
    persona = await world.persona(await world.server())
    before, during = await updates(world, persona, 20), await updates(world, persona, 40)
    calls = [call for _, call in before + during]
    prefix = new_prefix("worker-failover")
    topology = Topology(prefix, replicas=3)
    env = cluster_env(rabbit_cluster, prefix, LTM_DB_RETRY_SECONDS="5")
    killed: str | None = None
    try:
        with LtmProcess(services, ("worker",), tmp_path / "worker.log", env=env) as worker:
            await worker.wait_ready_async(timeout=60)
            # The dead node first, then the nodes in order: the first node that answers.
            first = await eventually(lambda: node_of(rabbit_cluster, "ltm-worker"))
            assert first == rabbit_cluster.nodes[0].name
            observer = rabbit_cluster.nodes[2].name  # the test's own node, never killed
            url = rabbit_cluster.amqp_url(observer)
            async with await aio_pika.connect(url) as connection:
                channel = await connection.channel(publisher_confirms=True)
                async with tap_events(channel, topology.events_exchange) as tap:
                    for _, call in before:
                        await publish_tool_call(channel, topology, call)
                    await tap.wait_until(
                        lambda t: answered(t, [c for _, c in before]), timeout=30, what="before"
                    )

                    # Calls in flight while the worker's node dies.
                    killed = first
                    await asyncio.gather(
                        asyncio.to_thread(rabbit_cluster.kill, first),
                        *(publish_tool_call(channel, topology, call) for _, call in during),
                    )

                    await tap.wait_until(
                        lambda t: answered(t, calls), timeout=120, what="every call answered"
                    )
                    now = await eventually(lambda: node_of(rabbit_cluster, "ltm-worker"))
                    assert now != first
                    assert "broker connection" in worker.output()  # said why it moved
                    statuses = {event.status for event in tap.events(ToolCallCompleted)}
                    assert statuses == {MemoryStatus.UPDATED}
    finally:
        if killed is not None:
            await asyncio.to_thread(rabbit_cluster.restart, killed)
    for memory_id, call in before + during:
        assert len(await world.revisions_of_call(call.tool_call_id)) == 1
        assert await world.content(memory_id) == call.arguments["memory_content"]  # type: ignore[index,call-overload]
