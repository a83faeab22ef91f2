"""Reading memories back from the real database: the gateway's reader, and its caches."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import aio_pika
import pytest
from aio_pika.abc import AbstractChannel

from contracts import (
    CacheInvalidate,
    Topology,
    UnknownPersona,
    UnknownServer,
    cache_routing_key,
)
from gateway import GatewayCaches, MemoryReader
from harness.amqp_proxy import AmqpProxy
from harness.snowflake import snowflake
from harness.waiting import eventually
from harness.world import World
from infra.settings import Settings
from tests.integration.gateway.conftest import GatewayFactory, fresh_shard, publish, until
from tests.support.read_back import shape_memory

NOW = datetime.now(UTC).replace(microsecond=0)


@pytest.fixture(scope="module")
def world(settings: Settings) -> World:
    return World(settings.database_url)


@pytest.fixture
async def reader(settings: Settings) -> AsyncIterator[MemoryReader]:
    opened = MemoryReader.from_settings(settings, GatewayCaches[Any, Any].from_settings(settings))
    yield opened
    await opened.close()


async def test_server_memories_of_the_personas_lineage_newest_first(
    world: World, reader: MemoryReader
) -> None:
    server = await world.server()
    persona = await world.persona(server)
    other_persona = await world.persona(server)
    teacher_id, teacher_disc = await world.user()
    oldest = await world.server_memory(persona, "{user} hosts movie night")
    await shape_memory(
        world,
        oldest,
        created_at=NOW - timedelta(hours=2),
        tags=("events", "movies"),
        teacher_user_id=teacher_id,
    )
    # Two memories created at the same instant: the higher id first.
    tied = [await world.server_memory(persona, f"tied {n}") for n in range(2)]
    for memory_id in tied:
        await shape_memory(world, memory_id, created_at=NOW - timedelta(hours=1))
    newest = await world.server_memory(persona, "the server's colour is teal")
    await world.server_memory(other_persona, "another lineage's memory")
    elsewhere = await world.persona(await world.server(), lineage=persona.lineage)
    await world.server_memory(elsewhere, "the same lineage in another server")

    listing = await reader.read(server.disc_id, persona.persona_id)

    assert listing.server_lines() == [
        f"ID:{newest} the server's colour is teal",
        f"ID:{tied[1]} tied 1",
        f"ID:{tied[0]} tied 0",
        f"ID:{oldest} [tags: events, movies] {{user}} hosts movie night",
    ]
    first = listing.server[-1]
    assert first.teacher_id == teacher_disc
    assert first.created_at == NOW - timedelta(hours=2)
    assert first.tags == ("events", "movies")
    assert listing.server[0].teacher_id is None
    assert listing.personal == {}
    other = await reader.read(server.disc_id, other_persona.persona_id)
    assert [memory.content for memory in other.server] == ["another lineage's memory"]


async def test_personal_memories_of_the_lineage_and_the_global_one(
    world: World, reader: MemoryReader
) -> None:
    server = await world.server()
    persona = await world.persona(server)
    alice_id, alice = await world.user()
    bob_id, bob = await world.user()
    own = await world.personal_memory(alice_id, persona.lineage, "{user} plays the violin")
    await shape_memory(world, own, created_at=NOW - timedelta(days=1), tags=("music",))
    global_one = await world.personal_memory(alice_id, 0, "{user} prefers to be called Ali")
    await world.personal_memory(alice_id, world.new_lineage(), "another persona's memory")
    bobs = await world.personal_memory(bob_id, 0, "{user} is vegetarian")
    stranger = snowflake()  # no `users` row: nothing is known about them

    listing = await reader.read(server.disc_id, persona.persona_id, [bob, alice, stranger])

    assert list(listing.personal) == [bob, alice, stranger]
    assert listing.personal_lines(alice) == [
        f"ID:{global_one} {{user}} prefers to be called Ali",
        f"ID:{own} [tags: music] {{user}} plays the violin",
    ]
    assert listing.personal_lines(bob) == [f"ID:{bobs} {{user}} is vegetarian"]
    assert listing.personal[stranger] == ()
    assert [memory.persona_lineage_id for memory in listing.personal[alice]] == [
        0,
        persona.lineage,
    ]


async def test_a_dm_is_the_server_keyed_by_the_users_id(world: World, reader: MemoryReader) -> None:
    user_id, user_disc = await world.user()
    dm = await world.server(user_disc, is_dm=True)
    persona = await world.persona(dm)
    remembered = await world.server_memory(persona, "{user} and {bot} talk about books")
    personal = await world.personal_memory(user_id, persona.lineage, "{user} reads sci-fi")

    listing = await reader.read(user_disc, persona.persona_id, [user_disc])

    assert listing.server_lines() == [f"ID:{remembered} {{user}} and {{bot}} talk about books"]
    assert listing.personal_lines(user_disc) == [f"ID:{personal} {{user}} reads sci-fi"]


async def test_an_unknown_server_or_a_persona_of_another_server_is_refused(
    world: World, reader: MemoryReader
) -> None:
    server = await world.server()
    other = await world.persona(await world.server())

    with pytest.raises(UnknownServer):
        await reader.read(snowflake(), other.persona_id)
    with pytest.raises(UnknownPersona):
        await reader.read(server.disc_id, other.persona_id)


async def test_a_running_gateway_reads_from_its_caches_until_an_invalidation(
    world: World,
    start_gateway: GatewayFactory,
    channel: AbstractChannel,
    topology: Topology,
) -> None:
    server = await world.server()
    persona = await world.persona(server)
    user_id, user_disc = await world.user()
    server_memory = await world.server_memory(persona, "movie night is on Fridays")
    personal = await world.personal_memory(user_id, 0, "{user} plays the violin")

    async with start_gateway(shards=(fresh_shard(),)) as gateway:
        before = await gateway.memories.read(server.disc_id, persona.persona_id, [user_disc])
        # Changed behind the service's back: no invalidation, so the caches still answer.
        await world.execute(
            "UPDATE server_memories SET content = 'movie night is on Saturdays'"
            " WHERE server_memory_id = %s",
            server_memory,
        )
        await world.execute(
            "UPDATE personal_memories SET content = '{user} plays the cello'"
            " WHERE personal_memory_id = %s",
            personal,
        )
        cached = await gateway.memories.read(server.disc_id, persona.persona_id, [user_disc])
        assert cached == before

        invalidations = (
            CacheInvalidate(cache="persona_state", key=server.disc_id),
            CacheInvalidate(cache="user", key=user_disc),
        )
        for event in invalidations:
            await publish(channel, topology, event, cache_routing_key(event.cache, event.key))
        await until(
            lambda: (
                gateway.caches.persona_state.get(server.disc_id) is None
                and gateway.caches.user.get(user_disc) is None
            ),
            what="both invalidations received",
        )
        after = await gateway.memories.read(server.disc_id, persona.persona_id, [user_disc])

    assert before.server_lines() == [f"ID:{server_memory} movie night is on Fridays"]
    assert before.personal_lines(user_disc) == [f"ID:{personal} {{user}} plays the violin"]
    assert after.server_lines() == [f"ID:{server_memory} movie night is on Saturdays"]
    assert after.personal_lines(user_disc) == [f"ID:{personal} {{user}} plays the cello"]


async def test_what_was_read_before_a_lost_broker_connection_is_read_again_once_it_is_back(
    world: World,
    settings: Settings,
    start_gateway: GatewayFactory,
    channel: AbstractChannel,
    topology: Topology,
) -> None:
    # Invalidations published while a gateway's connection is down never reach it (its queue
    # goes with the connection): what it kept from before may be stale.
    server = await world.server()
    persona = await world.persona(server)
    memory_id = await world.server_memory(persona, "movie night is on Fridays")
    async with AmqpProxy(settings.amqp_url) as proxy:
        connection = await aio_pika.connect_robust(proxy.url(heartbeat_s=1), reconnect_interval=0.2)
        try:
            async with start_gateway(shards=(fresh_shard(),), connection=connection) as gateway:
                before = await gateway.memories.read(server.disc_id, persona.persona_id)
                connections = proxy.connections
                proxy.drop()
                await world.execute(
                    "UPDATE server_memories SET content = 'movie night is on Saturdays'"
                    " WHERE server_memory_id = %s",
                    memory_id,
                )
                await until(lambda: proxy.connections > connections, what="a new connection")
                probe = CacheInvalidate(cache="user", key=snowflake())
                heard: list[tuple[str, str]] = []
                gateway.caches.add_listener(lambda cache, key: heard.append((cache, key)))

                async def consuming_again() -> bool:
                    await publish(channel, topology, probe, cache_routing_key("user", probe.key))
                    return ("user", probe.key) in heard

                await eventually(consuming_again, interval=0.2, what="invalidations consumed again")

                async def read_again() -> list[str] | None:
                    listing = await gateway.memories.read(server.disc_id, persona.persona_id)
                    lines = listing.server_lines()
                    return lines if lines != before.server_lines() else None

                after = await eventually(read_again, timeout=10, what="the change read")
        finally:
            await connection.close()

    assert after == [f"ID:{memory_id} movie night is on Saturdays"]
