"""Member events, deserialized by hikari from Discord's JSON, keep `guild_members` current."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from typing import Any

import hikari
import psycopg
import pytest
from hikari.impl import GatewayShardImpl
from structlog.testing import capture_logs

from gateway import MemberDirectory, attach_directory
from harness.gateway import unconnected_shard
from harness.snowflake import snowflake
from infra.settings import Settings

Row = tuple[str, str | None, str | None, str, bool]


@pytest.fixture(scope="module")
async def directory(settings: Settings) -> AsyncIterator[MemberDirectory]:
    members = MemberDirectory.from_settings(settings)
    yield members
    await members.close()


@pytest.fixture(scope="module")
def bot() -> hikari.GatewayBot:
    bot_id = base64.b64encode(snowflake().encode()).decode().rstrip("=")
    return hikari.GatewayBot(
        f"{bot_id}.fake.token",
        banner=None,
        logs=None,
        intents=hikari.Intents.ALL_UNPRIVILEGED | hikari.Intents.GUILD_MEMBERS,
    )


@pytest.fixture(scope="module")
def shard(bot: hikari.GatewayBot) -> GatewayShardImpl:
    """A real shard object for the events to name; it never connects."""
    return unconnected_shard(bot)


def user_payload(
    user_id: int, username: str, global_name: str | None, *, bot: bool = False
) -> dict[str, Any]:
    return {
        "id": str(user_id),
        "username": username,
        "global_name": global_name,
        "discriminator": "0",
        "avatar": None,
        "bot": bot,
    }


def member_payload(
    guild_id: int,
    user_id: int,
    username: str,
    *,
    nick: str | None = None,
    global_name: str | None = None,
    bot: bool = False,
) -> dict[str, Any]:
    return {
        "guild_id": str(guild_id),
        "user": user_payload(user_id, username, global_name, bot=bot),
        "nick": nick,
        "roles": [],
        "joined_at": datetime.now(UTC).isoformat(),
        "deaf": False,
        "mute": False,
        "flags": 0,
    }


def chunk_payload(
    guild_id: int,
    members: Sequence[dict[str, Any]],
    *,
    index: int = 0,
    count: int = 1,
    nonce: str | None = None,
) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "guild_id": str(guild_id),
        "members": [{k: v for k, v in m.items() if k != "guild_id"} for m in members],
        "chunk_index": index,
        "chunk_count": count,
    }
    if nonce is not None:
        payload["nonce"] = nonce
    return payload


async def rows(settings: Settings, guild_id: int) -> list[Row]:
    async with await psycopg.AsyncConnection.connect(settings.database_url) as connection:
        cursor = await connection.execute(
            """
            SELECT m.user_disc_id, m.display_name, m.global_name, m.username, m.is_bot
            FROM guild_members m JOIN servers s USING (server_id)
            WHERE s.server_disc_id = %s ORDER BY m.username
            """,
            (str(guild_id),),
        )
        return [(str(a), b, c, str(d), bool(e)) for a, b, c, d, e in await cursor.fetchall()]


async def dispatch(bot: hikari.GatewayBot, event: hikari.Event) -> None:
    """As the bot does on a gateway event, waiting for its listeners to finish (hikari logs
    their errors; they show here as rows that are not as expected)."""
    await bot.dispatch(event, return_tasks=True)


async def test_join_update_and_leave_events_keep_the_row_current(
    settings: Settings,
    bot: hikari.GatewayBot,
    shard: GatewayShardImpl,
    directory: MemberDirectory,
) -> None:
    attach_directory(bot, directory)
    guild, alice = int(snowflake()), int(snowflake())
    factory = bot.event_factory

    joined = member_payload(guild, alice, "alice", nick="Ali", global_name="Alice")
    await dispatch(bot, factory.deserialize_guild_member_add_event(shard, joined))
    assert await rows(settings, guild) == [(str(alice), "Ali", "Alice", "alice", False)]

    renamed = member_payload(guild, alice, "alice2", nick=None, global_name="Alice A.")
    await dispatch(bot, factory.deserialize_guild_member_update_event(shard, renamed))
    assert await rows(settings, guild) == [(str(alice), None, "Alice A.", "alice2", False)]

    left = {"guild_id": str(guild), "user": user_payload(alice, "alice2", "Alice A.")}
    await dispatch(bot, factory.deserialize_guild_member_remove_event(shard, left))
    assert await rows(settings, guild) == []

    # Replayed events are harmless: upserts and deletes are idempotent.
    await dispatch(bot, factory.deserialize_guild_member_remove_event(shard, left))
    assert await rows(settings, guild) == []


async def test_a_member_chunk_upserts_its_members(
    settings: Settings,
    bot: hikari.GatewayBot,
    shard: GatewayShardImpl,
    directory: MemberDirectory,
) -> None:
    guild = int(snowflake())
    ids = [int(snowflake()) for _ in range(3)]
    members = [
        member_payload(guild, ids[0], "alice", nick="Ali", global_name="Alice"),
        member_payload(guild, ids[1], "bob", global_name=None),
        member_payload(guild, ids[2], "tomori", global_name="Tomori", bot=True),
    ]
    event = bot.event_factory.deserialize_guild_member_chunk_event(
        shard, chunk_payload(guild, members)
    )
    await directory.on_member_chunk(event)
    await directory.on_member_chunk(event)  # twice: same rows
    assert await rows(settings, guild) == [
        (str(ids[0]), "Ali", "Alice", "alice", False),
        (str(ids[1]), None, None, "bob", False),
        (str(ids[2]), None, "Tomori", "tomori", True),
    ]


async def test_a_complete_member_list_prunes_departed_members(
    settings: Settings,
    bot: hikari.GatewayBot,
    shard: GatewayShardImpl,
    directory: MemberDirectory,
) -> None:
    guild = int(snowflake())
    stale, alice, bob, carol = (int(snowflake()) for _ in range(4))
    factory = bot.event_factory
    entity = bot.entity_factory
    await directory.upsert_members(
        guild, [entity.deserialize_member(member_payload(guild, stale, "gone"))]
    )
    directory.expect_full_member_list(guild, "full-1")

    first = chunk_payload(
        guild, [member_payload(guild, alice, "alice")], index=0, count=2, nonce="full-1"
    )
    await directory.on_member_chunk(factory.deserialize_guild_member_chunk_event(shard, first))
    # Carol joins while the list is being sent: the snapshot does not name her.
    carol_joined = member_payload(guild, carol, "carol")
    await directory.on_member_create(
        factory.deserialize_guild_member_add_event(shard, carol_joined)
    )
    assert [row[3] for row in await rows(settings, guild)] == ["alice", "carol", "gone"]

    second = chunk_payload(
        guild, [member_payload(guild, bob, "bob")], index=1, count=2, nonce="full-1"
    )
    await directory.on_member_chunk(factory.deserialize_guild_member_chunk_event(shard, second))
    assert [row[3] for row in await rows(settings, guild)] == ["alice", "bob", "carol"]


async def test_a_chunk_does_not_bring_back_a_member_who_just_left(
    settings: Settings,
    bot: hikari.GatewayBot,
    shard: GatewayShardImpl,
    directory: MemberDirectory,
) -> None:
    guild, alice, bob = int(snowflake()), int(snowflake()), int(snowflake())
    factory = bot.event_factory
    left = {"guild_id": str(guild), "user": user_payload(bob, "bob", None)}
    await directory.on_member_delete(factory.deserialize_guild_member_remove_event(shard, left))
    older_snapshot = chunk_payload(
        guild, [member_payload(guild, alice, "alice"), member_payload(guild, bob, "bob")]
    )
    await directory.on_member_chunk(
        factory.deserialize_guild_member_chunk_event(shard, older_snapshot)
    )
    assert [row[3] for row in await rows(settings, guild)] == ["alice"]


async def test_a_server_row_deleted_meanwhile_is_created_again(
    settings: Settings, bot: hikari.GatewayBot, directory: MemberDirectory
) -> None:
    guild, alice = int(snowflake()), int(snowflake())
    member = bot.entity_factory.deserialize_member(member_payload(guild, alice, "alice"))
    await directory.upsert_member(member)
    async with await psycopg.AsyncConnection.connect(settings.database_url) as connection:
        await connection.execute("DELETE FROM servers WHERE server_disc_id = %s", (str(guild),))
        await connection.commit()
    assert await rows(settings, guild) == []
    await directory.upsert_member(member)
    assert await rows(settings, guild) == [(str(alice), None, None, "alice", False)]


async def test_a_failed_write_is_logged_not_raised_into_hikari(
    settings: Settings, bot: hikari.GatewayBot, shard: GatewayShardImpl
) -> None:
    broken = MemberDirectory.from_settings(
        settings.model_copy(update={"database_url": "postgresql://nobody@127.0.0.1:1/none"})
    )
    guild, alice = int(snowflake()), int(snowflake())
    event = bot.event_factory.deserialize_guild_member_add_event(
        shard, member_payload(guild, alice, "alice")
    )
    with capture_logs() as logs:
        await broken.on_member_create(event)
    await broken.close()
    [failed] = [entry for entry in logs if entry["event"] == "directory.write_failed"]
    assert failed["guild_id"] == str(guild)
    assert failed["user_id"] == str(alice)
