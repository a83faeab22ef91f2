"""`LTM_AMQP_REPLICAS`: every queue of the topology replicated on a cluster, capped on one node,
and a deployment whose processes disagree told which setting differs."""

from __future__ import annotations

import asyncio
import json
import uuid

import aio_pika
import pytest

from contracts import Topology
from harness.broker import delete_topology
from harness.localnodes import RabbitCluster
from infra.messaging import amqp
from infra.messaging.topology import ReplicasMismatch, declare_shard_queue, declare_topology
from infra.settings import Settings


def _members(cluster: RabbitCluster, prefix: str) -> dict[str, set[str]]:
    """Each queue of `prefix` and the nodes of its replicas (quorum queues and streams)."""
    listing = cluster.first.ctl(
        "list_queues", "-p", cluster.spec.vhost, "name", "members", "--formatter", "json"
    )
    return {
        row["name"]: set(row["members"])
        for row in json.loads(listing)
        if row["name"].startswith(prefix)
    }


@pytest.mark.localnodes
async def test_with_three_replicas_every_queue_has_a_member_on_each_node(
    rabbit_cluster: RabbitCluster,
) -> None:
    settings = Settings(
        amqp_url=",".join(rabbit_cluster.amqp_urls()),
        amqp_prefix=f"replicas{uuid.uuid4().hex[:6]}",
        amqp_replicas=3,
    )
    topology = settings.topology
    connection = await amqp.connect(settings)
    async with connection:
        channel = await connection.channel()
        await declare_topology(channel, topology, shards=[0, 1])

        members = await asyncio.to_thread(_members, rabbit_cluster, topology.prefix)

        nodes = {node.name for node in rabbit_cluster.nodes}
        assert members == {
            topology.worker_queue: nodes,
            topology.dead_letter_queue: nodes,
            topology.audit_stream: nodes,
            topology.shard_queue(0): nodes,
            topology.shard_queue(1): nodes,
        }
        await delete_topology(channel, topology)
        for shard in (0, 1):
            await channel.queue_delete(topology.shard_queue(shard))


async def test_three_replicas_on_one_node_make_one_and_redeclare(settings: Settings) -> None:
    # The machine's broker, one node, in the test run's own virtual host.
    topology = Topology(f"{settings.amqp_prefix}-single{uuid.uuid4().hex[:6]}", replicas=3)
    async with await aio_pika.connect(settings.amqp_url) as connection:
        channel = await connection.channel()
        await declare_topology(channel, topology, shards=[0])
        await declare_topology(channel, topology, shards=[0])  # as every process does
        queue = await channel.declare_queue(topology.worker_queue, passive=True)
        assert queue.declaration_result.message_count == 0
        await delete_topology(channel, topology)
        await channel.queue_delete(topology.shard_queue(0))


async def test_processes_that_disagree_on_replicas_are_told_which_setting_differs(
    settings: Settings,
) -> None:
    prefix = f"{settings.amqp_prefix}-mismatch{uuid.uuid4().hex[:6]}"
    async with await aio_pika.connect(settings.amqp_url) as connection:
        await declare_topology(await connection.channel(), Topology(prefix))
        try:
            with pytest.raises(ReplicasMismatch, match=r"LTM_AMQP_REPLICAS=3 of this process"):
                await declare_topology(await connection.channel(), Topology(prefix, replicas=3))
            await declare_shard_queue(await connection.channel(), Topology(prefix, replicas=2), 0)
            with pytest.raises(ReplicasMismatch, match=r"LTM_AMQP_REPLICAS=unset"):
                await declare_shard_queue(await connection.channel(), Topology(prefix), 0)
        finally:
            channel = await connection.channel()
            await delete_topology(channel, Topology(prefix))
            await channel.queue_delete(Topology(prefix).shard_queue(0))
