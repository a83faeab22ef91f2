"""The whole loop: the gateway's tool client, the real worker and database, hikari to Discord."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator

import psycopg
import pytest

from contracts import DELETE_COLOR, UPDATE_COLOR, Participant
from gateway import Gateway, MessageContext
from harness.fake_discord import FakeDiscord
from harness.gateway import running_gateway
from harness.snowflake import snowflake
from harness.waiting import eventually
from harness.world import Persona, World, participant
from infra.settings import Settings

pytestmark = pytest.mark.usefixtures("worker_process")

SHARD = 9_000  # a shard of this module's own: no other test consumes it


@pytest.fixture(scope="module")
async def fake_discord() -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord() as fake:
        yield fake


@pytest.fixture
async def gateway(settings: Settings, fake_discord: FakeDiscord) -> AsyncIterator[Gateway]:
    async with running_gateway(
        settings, fake_discord, shards=(SHARD,), shard_count=SHARD + 1
    ) as running:
        yield running


def _context(
    guild_id: str, persona_id: int, triggerer: str, people: tuple[Participant, ...]
) -> MessageContext:
    return MessageContext(
        guild_id=guild_id,
        channel_id=snowflake(),
        triggerer_id=triggerer,
        bot_user_id="100000000000000001",
        persona_id=persona_id,
        shard_id=SHARD,
        participants=people,
    )


async def _posted(fake_discord: FakeDiscord, channel: str) -> None:
    async def posted() -> bool:
        return len(fake_discord.messages_in(channel)) >= 1

    await eventually(posted, what=f"an embed posted in {channel}")


async def _a_later_embed_handled(
    gateway: Gateway, fake_discord: FakeDiscord, world: World, persona: Persona
) -> None:
    """A call made now, on the same shard, until its embed is posted and the gateway is idle.

    The worker publishes a call's events together, its answer among them, and the shard queue
    is consumed in order: an embed published with an earlier answer has been handled by then,
    so a check that there is no second embed comes after one would have been posted.
    """
    memory_id = await world.server_memory(persona, "{user} waters the plants")
    triggerer = snowflake()
    context = _context(
        persona.server.disc_id, persona.persona_id, triggerer, (participant(triggerer, "Dan"),)
    )
    answer = await gateway.tool_client.call(
        f"e2e-later-{uuid.uuid4()}",
        "update_long_term_memory",
        {"memory_id": memory_id, "memory_content": "{user} waters the plants daily"},
        context,
    )
    assert answer["success"] is True
    channel = str(context.channel_id)

    async def handled() -> bool:
        return len(fake_discord.messages_in(channel)) == 1 and gateway.shard_consumer.in_flight == 0

    await eventually(handled, what="the later embed posted and the gateway idle")


async def test_tool_call_through_the_worker_posts_exactly_one_embed(
    gateway: Gateway, fake_discord: FakeDiscord, world: World
) -> None:
    server = await world.server()
    persona = await world.persona(server, nickname="Tomori")
    memory_id = await world.server_memory(persona, "{user} hosts movie night on Fridays")
    triggerer = snowflake()
    context = _context(
        server.disc_id, persona.persona_id, triggerer, (participant(triggerer, "Bob"),)
    )

    answer = await gateway.tool_client.call(
        "e2e-call-1",
        "update_long_term_memory",
        # As some LLM APIs give them: a JSON string.
        json.dumps(
            {"memory_id": memory_id, "memory_content": "{user} hosts movie night on Saturdays"}
        ),
        context,
        timeout_s=20,
    )

    assert answer["status"] == "memory_updated_successfully" and answer["success"] is True
    assert answer["memory_id"] == memory_id
    channel = str(context.channel_id)
    await _posted(fake_discord, channel)
    await _a_later_embed_handled(gateway, fake_discord, world, persona)
    [post] = fake_discord.posts(channel)
    [embed] = post.json["embeds"]
    assert embed["color"] == UPDATE_COLOR
    assert "Tomori" in embed["title"]
    assert "Bob hosts movie night on Saturdays" in embed["description"]
    assert "```" in embed["description"]
    assert "/memory server" in embed["footer"]["text"]
    assert any("Fridays" in field["value"] for field in embed.get("fields", []))
    assert await world.content(memory_id) == "{user} hosts movie night on Saturdays"


async def test_a_repeated_tool_call_is_answered_again_without_a_second_embed(
    gateway: Gateway, fake_discord: FakeDiscord, world: World
) -> None:
    server = await world.server()
    persona = await world.persona(server)
    owner_id, owner_disc = await world.user()
    memory_id = await world.personal_memory(owner_id, persona.lineage, "{user} plays chess")
    triggerer = snowflake()
    people = (participant(triggerer, "Bob"), participant(owner_disc, "Carol"))
    context = _context(server.disc_id, persona.persona_id, triggerer, people)
    arguments = {"memory_id": memory_id, "memory_content": "", "target_user": "Carol"}

    first = await gateway.tool_client.call(
        "e2e-call-2", "update_long_term_memory", arguments, context
    )
    channel = str(context.channel_id)
    await _posted(fake_discord, channel)
    second = await gateway.tool_client.call(
        "e2e-call-2", "update_long_term_memory", arguments, context
    )
    # The answer comes before any embed the repeat would publish: wait past where it would be.
    await _a_later_embed_handled(gateway, fake_discord, world, persona)

    assert first == second
    assert first["status"] == "memory_deleted_successfully"
    assert first["content_deleted"] == "{user} plays chess"
    [post] = fake_discord.posts(channel)
    [embed] = post.json["embeds"]
    assert embed["color"] == DELETE_COLOR and "Carol" in embed["title"]
    assert "Carol plays chess" in embed["description"]
    assert len(await world.revisions(memory_id)) == 1


async def test_the_notice_of_a_call_is_recorded_with_its_memory(
    gateway: Gateway, fake_discord: FakeDiscord, world: World, settings: Settings
) -> None:
    server = await world.server()
    persona = await world.persona(server)
    memory_id = await world.server_memory(persona, "{user} bakes bread")
    triggerer = snowflake()
    context = _context(
        server.disc_id, persona.persona_id, triggerer, (participant(triggerer, "Eve"),)
    )
    answer = await gateway.tool_client.call(
        f"e2e-notice-{uuid.uuid4()}",
        "update_long_term_memory",
        {"memory_id": memory_id, "memory_content": "{user} bakes sourdough"},
        context,
        timeout_s=20,
    )
    assert answer["success"] is True
    channel = str(context.channel_id)
    await _posted(fake_discord, channel)
    [message] = fake_discord.messages_in(channel)

    async def recorded() -> tuple[object, ...] | None:
        with psycopg.connect(settings.database_url) as connection:
            return connection.execute(
                "SELECT message_id, memory_id, scope, guild_id, shard_id FROM posted_notices"
                " WHERE channel_id = %s",
                (channel,),
            ).fetchone()

    row = await eventually(recorded, what="the notice recorded")
    assert row == (message["id"], memory_id, "server_wide", server.disc_id, SHARD)
