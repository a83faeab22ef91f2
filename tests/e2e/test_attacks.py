"""Attacks on a deployment of least privilege (docs/security.md), each tried with the real
broker and database under the attacker's own account, each refused, and nothing changed.

The deployment: the broker accounts and database roles of each part, a worker under the
worker's, trusting the bots' and the operators' broker users; and an intruder, another
application on the same broker that was allowed to publish to the tool-call exchange.
"""

from __future__ import annotations

import json
import secrets
import urllib.parse
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aio_pika
import aiormq
import psycopg
import pytest
from aio_pika.abc import AbstractChannel, AbstractConnection

from contracts import (
    MemoryStatus,
    ResultData,
    ToolCallCompleted,
    Topology,
    amqp_properties,
    encode_event,
    result_routing_key,
)
from harness.processes import LtmProcess
from harness.services import TestServices, rabbitmqctl
from harness.snowflake import snowflake
from harness.waiting import eventually
from harness.world import Persona, World, tool_call
from infra.messaging.accounts import Role
from infra.settings import Settings
from tests.support.commands import run_ltm
from tests.support.deployment import RoleDeployment, role_deployment

SHARD = 0  # declared by the definitions (LTM_SHARD_COUNT 1)


@pytest.fixture(scope="module")
def deployment(
    settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RoleDeployment]:
    with role_deployment(settings, tmp_path_factory.mktemp("attacks"), label="atk") as made:
        yield made


@pytest.fixture(scope="module")
def intruder(deployment: RoleDeployment) -> Iterator[tuple[str, str]]:
    """A user of the run's own that may publish to the tool-call exchange only: its name and
    URL."""
    # Hex: a password that begins with "-" would be read by rabbitmqctl as an option.
    name, password = f"ltm-intruder-{uuid.uuid4().hex[:8]}", secrets.token_hex(12)
    rabbitmqctl("add_user", name, password)
    try:
        rabbitmqctl(
            "set_permissions", "-p", deployment.broker.vhost, name,
            "^$", f"^{deployment.topology.tool_calls_exchange}$", "^$",
        )  # fmt: skip
        parts = urllib.parse.urlsplit(deployment.settings(Role.WORKER).amqp_url)
        netloc = f"{name}:{password}@{parts.netloc.rpartition('@')[2]}"
        yield name, urllib.parse.urlunsplit(parts._replace(netloc=netloc))
    finally:
        rabbitmqctl("delete_user", name)


@pytest.fixture(scope="module")
def worker(
    deployment: RoleDeployment, services: TestServices, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LtmProcess]:
    trusted = f"{deployment.user(Role.BOT)},{deployment.user(Role.OPERATOR)}"
    log = tmp_path_factory.mktemp("worker") / "worker.log"
    env = deployment.env(Role.WORKER, LTM_TRUSTED_PUBLISHERS=trusted)
    with LtmProcess(services, ("worker",), log, env=env) as process:
        process.wait_ready()
        yield process


@pytest.fixture
async def connect(deployment: RoleDeployment) -> AsyncIterator[Any]:
    opened: list[AbstractConnection] = []

    async def to(url: str) -> AbstractChannel:
        connection = await aio_pika.connect(url)
        opened.append(connection)
        return await connection.channel(publisher_confirms=True)

    yield to
    for connection in opened:
        await connection.close()


async def _depth(deployment: RoleDeployment, queue: str) -> int:
    """A queue's message count, asked passively (no account may be refused that)."""
    connection = await aio_pika.connect(deployment.settings(Role.OPERATOR).amqp_url)
    async with connection:
        channel = await connection.channel()
        declared = await channel.declare_queue(queue, passive=True)
        return int(declared.declaration_result.message_count or 0)


async def _memory(world: World) -> tuple[Persona, int]:
    persona = await world.persona(await world.server())
    return persona, await world.server_memory(persona, "likes tea")


async def _publish(
    channel: AbstractChannel, exchange: str, key: str, body: bytes, **props: Any
) -> None:
    target = await channel.get_exchange(exchange, ensure=False)
    await target.publish(aio_pika.Message(body, **props), routing_key=key)


async def test_a_bot_account_publishing_a_forged_result_is_refused(
    deployment: RoleDeployment, worker: LtmProcess, connect: Any
) -> None:
    topology = deployment.topology
    forged = ToolCallCompleted(
        tool_call_id=f"forged-{uuid.uuid4()}",
        tool_name="update_long_term_memory",
        guild_id=snowflake(),
        channel_id=snowflake(),
        shard_id=SHARD,
        success=True,
        status=MemoryStatus.UPDATED,
        message="Saved.",
        data=ResultData(scope="server_wide", memory_id=1, content_saved="forged"),
    )
    before = await _depth(deployment, topology.shard_queue(SHARD))
    channel = await connect(deployment.broker.url(Role.BOT))
    with pytest.raises(aiormq.exceptions.ChannelAccessRefused, match="ACCESS_REFUSED"):
        await _publish(
            channel,
            topology.events_exchange,
            result_routing_key(SHARD),
            encode_event(forged),
            **amqp_properties(forged),
        )
    assert await _depth(deployment, topology.shard_queue(SHARD)) == before


async def test_a_worker_account_reading_the_audit_stream_is_refused(
    deployment: RoleDeployment, worker: LtmProcess, connect: Any
) -> None:
    topology = deployment.topology
    channel = await connect(deployment.broker.url(Role.WORKER))
    stream = await channel.declare_queue(topology.audit_stream, passive=True)
    await channel.set_qos(prefetch_count=10)
    read: list[bytes] = []

    async def keep(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        read.append(message.body)

    with pytest.raises(aiormq.exceptions.ChannelAccessRefused, match="ACCESS_REFUSED"):
        await stream.consume(keep, arguments={"x-stream-offset": "first"})
    assert read == []


async def test_a_bot_account_binding_to_the_audit_events_is_refused(
    deployment: RoleDeployment, worker: LtmProcess, connect: Any
) -> None:
    topology = deployment.topology
    channel = await connect(deployment.broker.url(Role.BOT))
    events = await channel.get_exchange(topology.events_exchange, ensure=False)
    queue = await channel.declare_queue(topology.cache_queue("eavesdropper"), exclusive=True)
    with pytest.raises(aiormq.exceptions.ChannelAccessRefused, match=r"topic 'memory\.#'"):
        await queue.bind(events, routing_key="memory.#")


async def test_a_gateway_role_updating_a_memory_is_refused(
    deployment: RoleDeployment, world: World
) -> None:
    _, memory_id = await _memory(world)
    gateway = deployment.settings(Role.BOT).database_url
    async with await psycopg.AsyncConnection.connect(gateway, autocommit=True) as connection:
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="server_memories"):
            await connection.execute(
                "UPDATE server_memories SET content = 'forged' WHERE server_memory_id = %s",
                (memory_id,),
            )
    assert await world.content(memory_id) == "likes tea"
    assert await world.revisions(memory_id) == []


async def test_an_untrusted_publishers_call_is_dead_lettered_and_changes_nothing(
    deployment: RoleDeployment,
    worker: LtmProcess,
    intruder: tuple[str, str],
    connect: Any,
    world: World,
    services: TestServices,
) -> None:
    topology = deployment.topology
    persona, memory_id = await _memory(world)
    call = tool_call(
        persona, {"memory_id": memory_id, "memory_content": "forged"}, triggerer_id=snowflake()
    )
    intruder_user, intruder_url = intruder
    channel = await connect(intruder_url)
    await _publish(
        channel,
        topology.tool_calls_exchange,
        call.tool_name,
        encode_event(call),
        **amqp_properties(call),
        user_id=intruder_user,
    )

    async def dead_lettered() -> bool:
        return await _depth(deployment, topology.dead_letter_queue) >= 1

    await eventually(dead_lettered, what="the intruder's call dead-lettered")
    operator = deployment.env(Role.OPERATOR)
    listed = await run_ltm(services, "dlq", "list", "--json", **operator)
    [entry] = [e for e in _json(listed.stdout) if e["tool_call_id"] == call.tool_call_id]
    assert entry["reason"].startswith(f"untrusted publisher: user_id '{intruder_user}'")
    assert await world.inbox(call.tool_call_id) is None
    assert await world.content(memory_id) == "likes tea"

    # An operator who replays it vouches for it: it runs as the operator's, the intruder's
    # name kept beside it.
    replayed = await run_ltm(services, "dlq", "replay", "--id", str(call.event_id), **operator)
    assert replayed.code == 0, replayed.stderr

    async def applied() -> bool:
        return await world.content(memory_id) == "forged"

    await eventually(applied, what="the replayed call applied")
    [revision] = await world.revisions(memory_id)
    assert revision["tool_call_id"] == call.tool_call_id


def _json(text: str) -> list[dict[str, Any]]:
    parsed: list[dict[str, Any]] = json.loads(text)
    return parsed


async def test_a_forged_user_id_is_refused_by_the_broker(
    deployment: RoleDeployment, worker: LtmProcess, connect: Any, world: World
) -> None:
    topology = deployment.topology
    persona, memory_id = await _memory(world)
    call = tool_call(
        persona, {"memory_id": memory_id, "memory_content": "forged"}, triggerer_id=snowflake()
    )
    channel = await connect(deployment.broker.url(Role.BOT))
    with pytest.raises(aiormq.exceptions.ChannelPreconditionFailed, match="user_id"):
        await _publish(
            channel,
            topology.tool_calls_exchange,
            call.tool_name,
            encode_event(call),
            **amqp_properties(call),
            user_id=deployment.user(Role.OPERATOR),  # pretending to be the operator
        )
    # A call of the bot's own, after it, is answered: the forged one never reached the worker.
    honest = tool_call(
        persona,
        {"memory_id": memory_id, "memory_content": "likes coffee"},
        triggerer_id=snowflake(),
    )
    channel = await connect(deployment.broker.url(Role.BOT))
    await _publish(
        channel,
        topology.tool_calls_exchange,
        honest.tool_name,
        encode_event(honest),
        **amqp_properties(honest),
        user_id=deployment.user(Role.BOT),
    )

    async def honest_applied() -> bool:
        return await world.content(memory_id) == "likes coffee"

    await eventually(honest_applied, what="the honest call applied")
    assert await world.inbox(call.tool_call_id) is None
    assert [r["tool_call_id"] for r in await world.revisions(memory_id)] == [honest.tool_call_id]


async def test_a_worker_account_publishing_a_tool_call_is_refused(
    deployment: RoleDeployment, worker: LtmProcess, connect: Any, world: World
) -> None:
    topology: Topology = deployment.topology
    persona, memory_id = await _memory(world)
    call = tool_call(
        persona, {"memory_id": memory_id, "memory_content": "forged"}, triggerer_id=snowflake()
    )
    channel = await connect(deployment.broker.url(Role.WORKER))
    with pytest.raises(aiormq.exceptions.ChannelAccessRefused, match="ACCESS_REFUSED"):
        await _publish(
            channel,
            topology.tool_calls_exchange,
            call.tool_name,
            encode_event(call),
            **amqp_properties(call),
            user_id=deployment.user(Role.WORKER),
        )
    assert await world.inbox(call.tool_call_id) is None
    assert await world.content(memory_id) == "likes tea"
