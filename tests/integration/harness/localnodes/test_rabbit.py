"""A RabbitMQ cluster of our own: three nodes, a replicated quorum queue, a leader's node
killed and restarted, a TLS listener."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import urllib.request
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aio_pika
import pytest
from aio_pika.abc import AbstractConnection

from harness.localnodes import LocalNodeError, RabbitCluster, TlsFiles
from harness.localnodes.running import started_cluster
from harness.waiting import eventually
from infra.messaging import amqp
from infra.settings import Settings

pytestmark = pytest.mark.localnodes


@asynccontextmanager
async def _connected(
    url: str, ssl_context: ssl.SSLContext | None = None
) -> AsyncIterator[AbstractConnection]:
    connection = await aio_pika.connect(url, ssl_context=ssl_context)
    async with connection:
        yield connection


async def _declare_quorum_queue(url: str) -> str:
    name = f"ltm-test-{uuid.uuid4().hex[:8]}"
    async with _connected(url) as connection:
        channel = await connection.channel()
        await channel.declare_queue(
            name,
            durable=True,
            arguments={"x-queue-type": "quorum", "x-quorum-initial-group-size": 3},
        )
    return name


async def _leader(cluster: RabbitCluster, queue: str) -> str | None:
    try:
        return await asyncio.to_thread(cluster.quorum_leader, queue)
    except LocalNodeError:
        return None  # no node answers during an election: ask again


async def test_three_nodes_run_as_one_cluster(rabbit_cluster: RabbitCluster) -> None:
    names = {node.name for node in rabbit_cluster.nodes}

    assert len(names) == 3
    assert await asyncio.to_thread(rabbit_cluster.running_nodes) == names
    # What one node takes in, another hands out.
    first_url, *_, last_url = rabbit_cluster.amqp_urls()
    queue = await _declare_quorum_queue(first_url)
    async with _connected(first_url) as connection:
        channel = await connection.channel(publisher_confirms=True)
        await channel.default_exchange.publish(aio_pika.Message(b"across"), routing_key=queue)
    async with _connected(last_url) as connection:
        channel = await connection.channel()
        message = await (await channel.get_queue(queue)).get(no_ack=True)
        assert message is not None
        assert message.body == b"across"


async def test_a_quorum_queue_of_three_has_a_member_on_every_node(
    rabbit_cluster: RabbitCluster,
) -> None:
    queue = await _declare_quorum_queue(rabbit_cluster.amqp_urls()[0])

    members = await asyncio.to_thread(rabbit_cluster.quorum_members, queue)

    assert {member.node for member in members} == {node.name for node in rabbit_cluster.nodes}
    assert sum(member.leads for member in members) == 1


@pytest.mark.timeout(180)
async def test_killing_the_leaders_node_elects_another_and_keeps_confirmed_messages(
    rabbit_cluster: RabbitCluster,
) -> None:
    queue = await _declare_quorum_queue(rabbit_cluster.amqp_urls()[0])
    leader = await eventually(lambda: _leader(rabbit_cluster, queue), what="a leader")
    survivor = next(node for node in rabbit_cluster.nodes if node.name != leader)
    bodies = [f"confirmed {n}".encode() for n in range(20)]
    async with _connected(rabbit_cluster.amqp_url(survivor.name)) as connection:
        channel = await connection.channel(publisher_confirms=True)
        for body in bodies:
            await channel.default_exchange.publish(
                aio_pika.Message(body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                routing_key=queue,
            )
    killed = rabbit_cluster.node(leader)
    beam = killed.pid

    try:
        await asyncio.to_thread(rabbit_cluster.kill, leader)
        assert not killed.is_running

        async def new_leader() -> str | None:
            elected = await _leader(rabbit_cluster, queue)
            return elected if elected not in (None, leader) else None

        elected = await eventually(new_leader, timeout=30, what="another leader")
        assert elected != leader
        async with _connected(rabbit_cluster.amqp_url(survivor.name)) as connection:
            channel = await connection.channel()
            kept = await channel.get_queue(queue)
            got = []
            while (message := await kept.get(no_ack=False, fail=False)) is not None:
                got.append(message.body)
            # Left unacknowledged: closing the channel puts them back for the restarted node.
        assert got == bodies
    finally:
        if not killed.is_running:
            await asyncio.to_thread(rabbit_cluster.restart, leader)

    assert killed.pid not in (None, beam)

    async def rejoined() -> bool:
        try:
            members = await asyncio.to_thread(rabbit_cluster.quorum_members, queue)
        except LocalNodeError:
            return False
        states = {member.node: member.raft_state for member in members}
        return states.get(leader) in ("follower", "leader")

    await eventually(rejoined, timeout=60, what=f"{leader} back in the queue's group")
    async with _connected(rabbit_cluster.amqp_url(leader)) as connection:
        channel = await connection.channel()
        declared = await channel.declare_queue(queue, passive=True)
        assert declared.declaration_result.message_count == len(bodies)


async def test_the_tls_listener_proves_the_node_with_the_ca(
    rabbit_cluster: RabbitCluster, localnodes_tls: TlsFiles
) -> None:
    url = rabbit_cluster.amqp_urls(tls=True)[0]
    trusting = ssl.create_default_context(cafile=str(localnodes_tls.ca))

    async with _connected(url, ssl_context=trusting) as connection:
        channel = await connection.channel()
        declared = await channel.declare_queue(exclusive=True)
        assert declared.name

    # The system's store, which does not hold our CA (`amqp.connect` closes the failed attempt).
    with pytest.raises(aio_pika.exceptions.AMQPConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
        await amqp.connect(Settings(amqp_url=url))


def test_node_names_in_use_are_refused_and_their_nodes_left_alone(
    rabbit_cluster: RabbitCluster, tmp_path: Path
) -> None:
    """Started anyway, the twin could not register; worse, a CLI call naming it would reach
    the running node."""
    prefix = rabbit_cluster.first.name.removesuffix("1@localhost")
    twin = RabbitCluster.plan(tmp_path, prefix=prefix, size=1)
    pids = [node.pid for node in rabbit_cluster.nodes]

    with pytest.raises(LocalNodeError, match=f"already in use on this machine: {prefix}1@"):
        twin.start()

    assert [node.pid for node in rabbit_cluster.nodes] == pids
    assert not list(tmp_path.iterdir())


@pytest.mark.timeout(120)
def test_a_node_with_management_answers_its_http_api_for_the_clusters_user(
    tmp_path: Path,
) -> None:
    with started_cluster(
        base_dir=tmp_path, size=1, management=True, user="ltm-admin", password="s3cret"
    ) as single:
        port = single.first.spec.management_port
        request = urllib.request.Request(f"http://127.0.0.1:{port}/api/whoami")
        token = base64.b64encode(b"ltm-admin:s3cret").decode()
        request.add_header("Authorization", f"Basic {token}")

        with urllib.request.urlopen(request, timeout=10) as response:
            who = json.loads(response.read())

    assert who["name"] == "ltm-admin"
    assert not tmp_path.exists()  # stopping removed the node's folders, then the empty base
