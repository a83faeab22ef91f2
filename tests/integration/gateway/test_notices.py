"""Notices recorded as they are posted, and retracted on request (`notice.retract`): the
message deleted through hikari, then its record; a 404 counts as deleted, a 403 keeps the
record marked `forbidden`."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
from aio_pika.abc import AbstractChannel

from contracts import EmbedRequested, NoticeRetract, Topology, retract_routing_key
from harness.fake_discord import FakeDiscord, Reply
from harness.snowflake import snowflake
from infra.settings import Settings
from tests.integration.gateway.conftest import (
    GatewayFactory,
    embed_requested,
    fresh_shard,
    handled,
    publish,
    publish_embed,
    until,
)


def _notice(shard_id: int) -> EmbedRequested:
    owner = snowflake()
    return embed_requested(shard_id).model_copy(
        update={"memory_id": 4242, "scope": "target_user", "owner_disc_id": owner}
    )


def _row(settings: Settings, event_id: uuid.UUID) -> dict[str, Any] | None:
    with psycopg.connect(settings.database_url) as connection:
        cursor = connection.execute(
            "SELECT shard_id, channel_id, message_id, memory_id, scope, owner_disc_id, guild_id,"
            " posted_at, retract_error FROM posted_notices WHERE event_id = %s",
            (event_id,),
        )
        found = cursor.fetchone()
        if found is None:
            return None
        return dict(zip([column.name for column in cursor.description or ()], found, strict=True))


async def _retract(
    channel: AbstractChannel, topology: Topology, shard_id: int, channel_id: str, message: str
) -> NoticeRetract:
    retract = NoticeRetract(channel_id=channel_id, message_id=message, memory_id=4242)
    await publish(channel, topology, retract, retract_routing_key(shard_id), expiration_s=None)
    return retract


async def test_a_posted_notice_is_recorded_once_with_its_message(
    start_gateway: GatewayFactory,
    fake_discord: FakeDiscord,
    channel: AbstractChannel,
    topology: Topology,
    settings: Settings,
) -> None:
    shard = fresh_shard()
    event = _notice(shard)
    async with start_gateway(shards=(shard,)) as gateway:
        await publish_embed(channel, topology, event)
        await handled(gateway, event)
        await publish_embed(channel, topology, event)  # a copy: neither posted nor recorded again
        [message] = fake_discord.messages_in(event.channel_id)
    row = _row(settings, event.event_id)
    assert row is not None
    assert {key: value for key, value in row.items() if key != "posted_at"} == {
        "shard_id": shard,
        "channel_id": event.channel_id,
        "message_id": message["id"],
        "memory_id": 4242,
        "scope": "target_user",
        "owner_disc_id": event.owner_disc_id,
        "guild_id": event.guild_id,
        "retract_error": None,
    }


async def test_an_embed_naming_no_memory_is_posted_and_not_recorded(
    start_gateway: GatewayFactory,
    fake_discord: FakeDiscord,
    channel: AbstractChannel,
    topology: Topology,
    settings: Settings,
) -> None:
    shard = fresh_shard()
    event = embed_requested(shard)  # as an older worker sends it
    async with start_gateway(shards=(shard,)) as gateway:
        await publish_embed(channel, topology, event)
        await handled(gateway, event)
    assert len(fake_discord.messages_in(event.channel_id)) == 1
    assert _row(settings, event.event_id) is None


async def test_a_retraction_deletes_the_message_then_its_record(
    start_gateway: GatewayFactory,
    fake_discord: FakeDiscord,
    channel: AbstractChannel,
    topology: Topology,
    settings: Settings,
) -> None:
    shard = fresh_shard()
    event = _notice(shard)
    async with start_gateway(shards=(shard,)) as gateway:
        await publish_embed(channel, topology, event)
        await handled(gateway, event)
        [message] = fake_discord.messages_in(event.channel_id)
        retract = await _retract(channel, topology, shard, event.channel_id, message["id"])
        await until(lambda: retract.event_id in gateway.shard_consumer.seen, what="retracted")
    assert fake_discord.messages_in(event.channel_id) == []
    [delete] = fake_discord.deletes(event.channel_id)
    assert delete.path == f"/api/v10/channels/{event.channel_id}/messages/{message['id']}"
    assert delete.status == 204
    assert _row(settings, event.event_id) is None


async def test_a_message_already_gone_counts_as_retracted(
    start_gateway: GatewayFactory,
    fake_discord: FakeDiscord,
    channel: AbstractChannel,
    topology: Topology,
    settings: Settings,
) -> None:
    shard = fresh_shard()
    event = _notice(shard)
    async with start_gateway(shards=(shard,)) as gateway:
        await publish_embed(channel, topology, event)
        await handled(gateway, event)
        [message] = fake_discord.messages_in(event.channel_id)
        fake_discord.messages.remove(message)  # deleted by a moderator meanwhile
        retract = await _retract(channel, topology, shard, event.channel_id, message["id"])
        await until(lambda: retract.event_id in gateway.shard_consumer.seen, what="retracted")
    assert [request.status for request in fake_discord.deletes(event.channel_id)] == [404]
    assert _row(settings, event.event_id) is None


@pytest.mark.parametrize(("reply", "error"), [(Reply.forbidden(), "forbidden")])
async def test_a_refused_retraction_keeps_the_record_with_its_error(
    start_gateway: GatewayFactory,
    fake_discord: FakeDiscord,
    channel: AbstractChannel,
    topology: Topology,
    settings: Settings,
    reply: Reply,
    error: str,
) -> None:
    shard = fresh_shard()
    event = _notice(shard)
    async with start_gateway(shards=(shard,)) as gateway:
        await publish_embed(channel, topology, event)
        await handled(gateway, event)
        [message] = fake_discord.messages_in(event.channel_id)
        fake_discord.always(event.channel_id, reply)
        retract = await _retract(channel, topology, shard, event.channel_id, message["id"])
        await until(lambda: retract.event_id in gateway.shard_consumer.seen, what="refused")
    assert fake_discord.messages_in(event.channel_id) == [message]
    row = _row(settings, event.event_id)
    assert row is not None and row["retract_error"] == error


async def test_a_retraction_waits_while_discord_is_away(
    start_gateway: GatewayFactory,
    fake_discord: FakeDiscord,
    channel: AbstractChannel,
    topology: Topology,
    settings: Settings,
) -> None:
    shard = fresh_shard()
    event = _notice(shard)
    async with start_gateway(shards=(shard,)) as gateway:
        await publish_embed(channel, topology, event)
        await handled(gateway, event)
        [message] = fake_discord.messages_in(event.channel_id)
        fake_discord.script(event.channel_id, *[Reply.server_error()] * 3)
        retract = await _retract(channel, topology, shard, event.channel_id, message["id"])
        await until(lambda: retract.event_id in gateway.shard_consumer.seen, what="retracted")
    statuses = [request.status for request in fake_discord.deletes(event.channel_id)]
    assert statuses == [500, 500, 500, 204]
    assert _row(settings, event.event_id) is None


async def test_a_notice_whose_record_failed_is_recorded_on_redelivery_not_posted_again(
    start_gateway: GatewayFactory,
    fake_discord: FakeDiscord,
    channel: AbstractChannel,
    topology: Topology,
    settings: Settings,
) -> None:
    shard = fresh_shard()
    event = _notice(shard)
    # The first insert of this event's record fails (a sequence's value survives the
    # rollback), as it would while the database restarts.
    fails = f"notice_fails_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(settings.database_url, autocommit=True) as connection:
        connection.execute(f"CREATE SEQUENCE {fails}")
        connection.execute(
            f"CREATE FUNCTION {fails}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
            f" IF NEW.event_id = '{event.event_id}' AND nextval('{fails}') = 1 THEN"
            " RAISE EXCEPTION 'the database is restarting'; END IF; RETURN NEW; END $$"
        )
        connection.execute(
            f"CREATE TRIGGER {fails} BEFORE INSERT ON posted_notices"
            f" FOR EACH ROW EXECUTE FUNCTION {fails}()"
        )
    try:
        async with start_gateway(shards=(shard,)) as gateway:
            await publish_embed(channel, topology, event)
            await handled(gateway, event)
            [message] = fake_discord.messages_in(event.channel_id)
            # Posted once: the redelivery records the message it posted, not a second POST.
            assert len(fake_discord.posts(event.channel_id)) == 1
    finally:
        with psycopg.connect(settings.database_url, autocommit=True) as connection:
            connection.execute(f"DROP TRIGGER {fails} ON posted_notices")
            connection.execute(f"DROP FUNCTION {fails}()")
            connection.execute(f"DROP SEQUENCE {fails}")
    row = _row(settings, event.event_id)
    assert row is not None and row["message_id"] == message["id"]
