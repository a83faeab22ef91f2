"""A worker given every node of a cluster (a dead one first): it connects to one that answers,
and when that node is killed while calls flow, it goes on on another; every call is answered
and applied once.

The node killed also leads the queue of the calls' shard, and not the worker queue: the
worker's new connection gets the calls at once and publishes their results while that queue
elects its next leader. RabbitMQ 3.10 nacks a channel that publishes then for its whole life
(in about two runs of three here: when the election is not over first); the worker moves to
a new channel (`infra.messaging.confirms`). The results are read from the shard's queue, as its
gateway gets them."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aio_pika
import pytest

from contracts import MemoryStatus, ToolCallCompleted, Topology
from harness.broker import publish_tool_call, queue_events
from harness.localnodes import RabbitCluster
from harness.localnodes.leadership import make_leader
from harness.processes import LtmProcess
from harness.services import TestServices
from harness.waiting import eventually
from harness.world import World
from infra.messaging.topology import declare_shard_queue
from infra.settings import Settings
from tests.support.failover import answered, cluster_env, new_prefix, node_of
from tests.support.failover import updates_of_new_memories as updates

pytestmark = [pytest.mark.localnodes, pytest.mark.timeout(300)]


async def test_the_worker_fails_over_to_another_node_and_answers_every_call(
    rabbit_cluster: RabbitCluster, services: TestServices, settings: Settings, tmp_path: Path
) -> None:
    world = World(settings.database_url)
    persona = await world.persona(await world.server())
    before, during = await updates(world, persona, 20), await updates(world, persona, 40)
    calls = [call for _, call in before + during]
    shard = calls[0].context.shard_id
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
                # The results as the shard's gateway gets them: from the shard's own queue (a
                # copy routed elsewhere arrives even when the shard queue refused it).
                shard_queue = await declare_shard_queue(channel, topology, shard)
                async with queue_events(shard_queue) as tap:
                    for _, call in before:
                        await publish_tool_call(channel, topology, call)
                    await tap.wait_until(
                        lambda t: answered(t, [c for _, c in before]), timeout=30, what="before"
                    )

                    await asyncio.to_thread(make_leader, rabbit_cluster, shard_queue.name, first)
                    await asyncio.to_thread(
                        make_leader, rabbit_cluster, topology.worker_queue, observer
                    )

                    # The worker's node dies, and calls come at once: the worker takes them on
                    # its next node while the shard queue is electing its next leader.
                    killed = first
                    await asyncio.to_thread(rabbit_cluster.kill, first)
                    await asyncio.gather(
                        *(publish_tool_call(channel, topology, call) for _, call in during)
                    )

                    await tap.wait_until(
                        lambda t: answered(t, calls), timeout=120, what="every call answered"
                    )
                    now = await eventually(lambda: node_of(rabbit_cluster, "ltm-worker"))
                    assert now != first
                    assert "worker.broker_connection" in worker.output()  # said why it moved
                    statuses = {event.status for event in tap.events(ToolCallCompleted)}
                    assert statuses == {MemoryStatus.UPDATED}
    finally:
        if killed is not None:
            await asyncio.to_thread(rabbit_cluster.restart, killed)
    for memory_id, call in before + during:
        assert len(await world.revisions_of_call(call.tool_call_id)) == 1
        assert await world.content(memory_id) == call.arguments["memory_content"]  # type: ignore[index,call-overload]
