"""A gateway given every node of a cluster (a dead one first): when its node is killed, its
connection comes back on another node, with its shard queue's consumer and its tool client."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from contracts import MemoryStatus
from harness.fake_discord import FakeDiscord
from harness.gateway import running_gateway
from harness.localnodes import RabbitCluster
from harness.processes import LtmProcess
from harness.services import TestServices
from harness.waiting import eventually
from harness.world import World
from infra.settings import Settings
from tests.support.failover import cluster_env, new_prefix, node_of, stuck_call
from tests.support.failover import updates_of_new_memories as updates

pytestmark = [pytest.mark.localnodes, pytest.mark.timeout(300)]


async def test_the_gateway_comes_back_on_another_node_with_its_consumers_and_tool_client(
    rabbit_cluster: RabbitCluster,
    services: TestServices,
    settings: Settings,
    fake_discord: FakeDiscord,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = World(settings.database_url)
    persona = await world.persona(await world.server())
    (_, before), (memory_id, after) = await updates(world, persona, 2)
    prefix = new_prefix("gateway-failover")
    env = cluster_env(rabbit_cluster, prefix)
    own = settings.model_copy(
        update={"amqp_url": env["LTM_AMQP_URL"], "amqp_prefix": prefix, "amqp_replicas": 3}
    )
    killed: str | None = None
    try:
        with LtmProcess(services, ("worker",), tmp_path / "worker.log", env=env) as worker:
            await worker.wait_ready_async(timeout=60)
            async with running_gateway(
                own, fake_discord, shards=(0,), shard_count=1, reconnect_interval_s=0.5
            ) as gateway:
                first = await eventually(lambda: node_of(rabbit_cluster, gateway.connection_name))
                assert first == rabbit_cluster.nodes[0].name  # the dead node was skipped
                answer = await gateway.tool_client.request(before, timeout_s=30)
                assert answer.status == MemoryStatus.UPDATED

                killed = first
                await asyncio.to_thread(rabbit_cluster.kill, first)

                async def elsewhere() -> bool:
                    node = await node_of(rabbit_cluster, gateway.connection_name)
                    return node not in (None, first) and gateway.ready

                await eventually(elsewhere, timeout=60, what="the gateway on another node")
                # The tool client publishes on the new connection; the result comes back
                # through the shard queue's consumer, restored there; so does the embed.
                try:
                    answer = await gateway.tool_client.request(after, timeout_s=60)
                except TimeoutError:
                    pytest.fail(await stuck_call(rabbit_cluster, worker, after.tool_call_id))
                assert answer.status == MemoryStatus.UPDATED
                channel_id = after.context.channel_id
                await eventually(
                    lambda: _posted(fake_discord, channel_id), timeout=30, what="the embed"
                )
    finally:
        if killed is not None:
            await asyncio.to_thread(rabbit_cluster.restart, killed)
    assert await world.content(memory_id) == after.arguments["memory_content"]  # type: ignore[index,call-overload]
    assert len(fake_discord.posts(after.context.channel_id)) == 1
    # aio-pika's channels waited for the connection to be back on a node before reopening
    # (`infra.messaging.amqp.FailoverChannel`): no error of theirs. (aiormq's line about the dead
    # node it could not connect to is one.)
    errors = [
        f"{r.name}: {r.msg}"
        for r in caplog.records
        if r.levelno >= logging.ERROR and r.name.startswith("aio_pika")
    ]
    assert errors == []


async def _posted(fake_discord: FakeDiscord, channel_id: str) -> bool:
    return bool(fake_discord.posts(channel_id))
