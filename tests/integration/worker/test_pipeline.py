"""Committed writes through the real database: the row, its revision, the result, the outbox."""

from __future__ import annotations

from typing import Any, Literal

import pytest

from contracts import EmbedRequested, MemoryStatus, Participant, decode_event
from harness.snowflake import snowflake
from harness.world import participant
from tests.integration.worker.checks import (
    Pipeline,
    Scene,
    assert_only_content_changed,
    assert_result,
    assert_success_events,
    single_revision,
)

Where = Literal["guild", "dm"]
Action = Literal["update", "delete"]


async def scene_in(pipeline: Pipeline, where: Where) -> Scene:
    return await pipeline.guild() if where == "guild" else await pipeline.dm()


@pytest.mark.parametrize("where", ["guild", "dm"])
@pytest.mark.parametrize("action", ["update", "delete"])
async def test_server_memory(pipeline: Pipeline, where: Where, action: Action) -> None:
    scene = await scene_in(pipeline, where)
    memory_id = await pipeline.server_memory(
        scene.persona, "The server's mascot is a cat.", teacher=scene.triggerer_user_id
    )
    before = await pipeline.row(memory_id)
    content = "  The server's mascot is a dog.  " if action == "update" else "   "
    call = scene.call({"memory_id": memory_id, "memory_content": content})

    processed = await pipeline.run(call)

    after = await pipeline.row(memory_id)
    if action == "update":
        assert_result(
            processed,
            call,
            MemoryStatus.UPDATED,
            {
                "scope": "server_wide",
                "memory_id": memory_id,
                "content_saved": "The server's mascot is a dog.",
            },
        )
        assert_only_content_changed(before, after, "The server's mascot is a dog.")
    else:
        assert_result(
            processed,
            call,
            MemoryStatus.DELETED,
            {
                "scope": "server_wide",
                "memory_id": memory_id,
                "content_deleted": "The server's mascot is a cat.",
            },
        )
        assert after is None
    assert not processed.replayed
    revision = await single_revision(
        pipeline.world,
        call,
        memory_id=memory_id,
        scope="server_wide",
        action="updated" if action == "update" else "deleted",
        before="The server's mascot is a cat.",
        after="The server's mascot is a dog." if action == "update" else None,
        server_id=scene.server.server_id,
        owner_user_id=None,
        lineage=scene.persona.lineage,
    )
    # The persona-state cache of the guild, or of the DM user.
    assert scene.server.disc_id == (call.context.guild_id or scene.triggerer)
    await assert_success_events(
        pipeline.world,
        processed,
        call,
        revision=revision,
        cache="persona_state",
        cache_key=scene.server.disc_id,
    )


@pytest.mark.parametrize("global_memory", [False, True], ids=["persona_lineage", "lineage_0"])
@pytest.mark.parametrize("action", ["update", "delete"])
async def test_personal_memory_in_guild(
    pipeline: Pipeline, global_memory: bool, action: Action
) -> None:
    scene = await pipeline.guild()
    alice_user_id, alice = await pipeline.world.user()
    await pipeline.world.member(scene.server, alice, "alice_w", display_name="Alice")
    lineage = 0 if global_memory else scene.persona.lineage
    memory_id = await pipeline.personal_memory(alice_user_id, lineage, "Alice has a cat.")
    before = await pipeline.row(memory_id)
    content = "Alice has two cats." if action == "update" else ""
    call = scene.call(
        {"memory_id": memory_id, "memory_content": content, "target_user": "Al"},
        participant(alice, "Al", "Alice", label="Alice (@alice_w)"),
    )

    processed = await pipeline.run(call)

    after = await pipeline.row(memory_id)
    data: dict[str, Any] = {
        "scope": "target_user",
        "memory_id": memory_id,
        "target_user": "Alice (@alice_w)",
    }
    if action == "update":
        data["content_saved"] = "Alice has two cats."
        assert_result(processed, call, MemoryStatus.UPDATED, data)
        assert_only_content_changed(before, after, "Alice has two cats.")
    else:
        data["content_deleted"] = "Alice has a cat."
        assert_result(processed, call, MemoryStatus.DELETED, data)
        assert after is None
    revision = await single_revision(
        pipeline.world,
        call,
        memory_id=memory_id,
        scope="target_user",
        action="updated" if action == "update" else "deleted",
        before="Alice has a cat.",
        after="Alice has two cats." if action == "update" else None,
        server_id=scene.server.server_id,
        owner_user_id=alice_user_id,
        lineage=lineage,  # the row's own lineage, 0 for a global memory
    )
    await assert_success_events(
        pipeline.world,
        processed,
        call,
        revision=revision,
        cache="user",
        cache_key=alice,
        owner_id=alice,
    )


NamedBy = Literal[
    "alias", "mention", "mention_bang", "display_name", "user_nickname", "global_name", "username"
]


@pytest.mark.parametrize(
    "named_by",
    [
        "alias",
        "mention",
        "mention_bang",
        "display_name",
        "user_nickname",
        "global_name",
        "username",
    ],
)
@pytest.mark.parametrize("action", ["update", "delete"])
async def test_personal_memory_target_named_by(
    pipeline: Pipeline, named_by: NamedBy, action: Action
) -> None:
    """Each way of naming the person finds the same owner, and only that owner's memory."""
    scene = await pipeline.guild()
    world = pipeline.world
    alice_user_id, alice = await world.user(nickname="Ally")
    await world.member(
        scene.server, alice, "alice_w", display_name="Wonder", global_name="Alice Global"
    )
    # A bot of the same display name: the directory's name stages skip it.
    await world.member(scene.server, snowflake(), "wonder_bot", display_name="Wonder", is_bot=True)
    # Someone else with a memory of the same lineage: never touched.
    bob_user_id, bob = await world.user(nickname="Bobby")
    await world.member(scene.server, bob, "bob_b", display_name="Bob", global_name="Bob Global")
    lineage = scene.persona.lineage if action == "update" else 0
    memory_id = await pipeline.personal_memory(alice_user_id, lineage, "Likes tea.")
    bobs = await pipeline.personal_memory(bob_user_id, lineage, "Likes coffee.")
    query = {
        "alias": "  @little   AL ",
        "mention": f"<@{alice}>",
        "mention_bang": f"<@!{alice}>",
        "display_name": "wonder",
        "user_nickname": "@Ally",
        "global_name": "alice  global",
        "username": "ALICE_W",
    }[named_by]
    participants: tuple[Participant, ...] = ()
    if named_by == "alias":
        participants = (participant(alice, "Little Al", label="Little Al"),)
    content = "Likes green tea." if action == "update" else ""
    call = scene.call(
        {"memory_id": memory_id, "memory_content": content, "target_user": query}, *participants
    )

    processed = await pipeline.run(call)

    label = "Little Al" if named_by == "alias" else "Wonder (@alice_w)"
    result = assert_result(
        processed, call, MemoryStatus.UPDATED if action == "update" else MemoryStatus.DELETED
    )
    assert result.data.scope == "target_user"
    assert result.data.target_user == label
    assert await pipeline.world.content(memory_id) == ("Likes green tea." if content else None)
    assert await pipeline.world.content(bobs) == "Likes coffee."
    revision = await single_revision(
        world,
        call,
        memory_id=memory_id,
        scope="target_user",
        action="updated" if action == "update" else "deleted",
        before="Likes tea.",
        after=content or None,
        server_id=scene.server.server_id,
        owner_user_id=alice_user_id,
        lineage=lineage,
    )
    await assert_success_events(
        world, processed, call, revision=revision, cache="user", cache_key=alice, owner_id=alice
    )


@pytest.mark.parametrize("global_memory", [False, True], ids=["persona_lineage", "lineage_0"])
@pytest.mark.parametrize("action", ["update", "delete"])
async def test_personal_memory_in_dm(
    pipeline: Pipeline, global_memory: bool, action: Action
) -> None:
    scene = await pipeline.dm()
    lineage = 0 if global_memory else scene.persona.lineage
    memory_id = await pipeline.personal_memory(scene.triggerer_user_id, lineage, "Works nights.")
    before = await pipeline.row(memory_id)
    content = "Works days now." if action == "update" else ""
    # The triggerer is the participant the scene adds, named by its alias.
    call = scene.call({"memory_id": memory_id, "memory_content": content, "target_user": "trig"})

    processed = await pipeline.run(call)

    result = assert_result(
        processed, call, MemoryStatus.UPDATED if action == "update" else MemoryStatus.DELETED
    )
    assert result.data.target_user == "Trig"
    after = await pipeline.row(memory_id)
    if action == "update":
        assert_only_content_changed(before, after, "Works days now.")
    else:
        assert after is None
    revision = await single_revision(
        pipeline.world,
        call,
        memory_id=memory_id,
        scope="target_user",
        action="updated" if action == "update" else "deleted",
        before="Works nights.",
        after=content or None,
        server_id=scene.server.server_id,
        owner_user_id=scene.triggerer_user_id,
        lineage=lineage,
    )
    await assert_success_events(
        pipeline.world,
        processed,
        call,
        revision=revision,
        cache="user",
        cache_key=scene.triggerer,
        owner_id=scene.triggerer,
    )


@pytest.mark.parametrize(
    ("raw", "stored"),
    [
        ("{alice} likes {user}", "alice likes {user}"),
        ("{{bot}} {{foo}} and {Char}", "{{bot}} foo and {Char}"),
        ('  json {"a":1} and { user }  ', 'json {"a":1} and { user }'),
    ],
)
async def test_content_is_sanitized_before_it_is_stored(
    pipeline: Pipeline, raw: str, stored: str
) -> None:
    scene = await pipeline.guild()
    memory_id = await pipeline.server_memory(scene.persona, "old")
    call = scene.call({"memory_id": memory_id, "memory_content": raw})

    processed = await pipeline.run(call)

    assert_result(
        processed,
        call,
        MemoryStatus.UPDATED,
        {"scope": "server_wide", "memory_id": memory_id, "content_saved": stored},
    )
    assert await pipeline.world.content(memory_id) == stored
    (revision,) = await pipeline.world.revisions_of_call(call.tool_call_id)
    assert revision["content_after"] == stored


async def test_length_is_counted_after_sanitizing_in_code_points(pipeline: Pipeline) -> None:
    scene = await pipeline.guild()
    memory_id = await pipeline.server_memory(scene.persona, "old")
    # 12 characters as written, 10 once sanitized; 5 code points of CJK, more bytes.
    first = scene.call({"memory_id": memory_id, "memory_content": "{abcdefghij}"})
    second = scene.call({"memory_id": memory_id, "memory_content": "日本語です。"})

    assert_result(await pipeline.run(first, max_memory_length=10), first, MemoryStatus.UPDATED)
    assert await pipeline.world.content(memory_id) == "abcdefghij"
    assert_result(await pipeline.run(second, max_memory_length=6), second, MemoryStatus.UPDATED)
    assert await pipeline.world.content(memory_id) == "日本語です。"


async def test_arguments_read_leniently_where_the_spec_allows(pipeline: Pipeline) -> None:
    """24.0 is 24, blank target_user is absent, legacy names are read, extra keys ignored."""
    scene = await pipeline.guild()
    world = pipeline.world
    alice_user_id, alice = await world.user()
    await world.member(scene.server, alice, "alice_w", display_name="Alice")
    server_memory = await pipeline.server_memory(scene.persona, "server fact")
    by_nickname = await pipeline.personal_memory(alice_user_id, 0, "fact one")
    by_id = await pipeline.personal_memory(alice_user_id, 0, "fact two")

    server_call = scene.call(
        {
            "memory_id": float(server_memory),
            "memory_content": "server fact, revised",
            "target_user": "   ",
            "reason": "outdated",
        }
    )
    nickname_call = scene.call(
        {"memory_id": by_nickname, "memory_content": "", "target_user_nickname": "Alice"}
    )
    id_call = scene.call(
        {
            "memory_id": by_id,
            "memory_content": "fact two, revised",
            "target_user": "",
            "target_user_discord_id": alice,
        }
    )

    assert_result(
        await pipeline.run(server_call),
        server_call,
        MemoryStatus.UPDATED,
        {
            "scope": "server_wide",
            "memory_id": server_memory,
            "content_saved": "server fact, revised",
        },
    )
    assert_result(await pipeline.run(nickname_call), nickname_call, MemoryStatus.DELETED)
    assert_result(await pipeline.run(id_call), id_call, MemoryStatus.UPDATED)
    assert await world.content(server_memory) == "server fact, revised"
    assert await world.content(by_nickname) is None
    assert await world.content(by_id) == "fact two, revised"


async def test_embed_names_the_persona_and_shows_the_text(pipeline: Pipeline) -> None:
    scene = await pipeline.guild()
    memory_id = await pipeline.server_memory(scene.persona, "{user} was here")
    call = scene.call({"memory_id": memory_id, "memory_content": "{user} left"})

    processed = await pipeline.run(call)

    assert_result(processed, call, MemoryStatus.UPDATED)
    embed_row = next(row for row in processed.outbox if row.event_type == "embed.requested")
    embed = decode_event(embed_row.body)
    assert isinstance(embed, EmbedRequested)
    assert scene.persona.nickname in embed.embed.title
    # {user} shows as the triggerer's name in a server memory; the old text shows too.
    assert "Trig left" in embed.embed.description
    assert any("Trig was here" in field.value for field in embed.embed.fields)
    assert str(memory_id) in (embed.embed.footer or "")


Footer = Literal["enabled", "personalization_off", "blacklisted"]


@pytest.mark.parametrize("footer", ["enabled", "personalization_off", "blacklisted"])
async def test_personal_embed_reflects_the_servers_settings(
    pipeline: Pipeline, footer: Footer
) -> None:
    world = pipeline.world
    scene = await pipeline.guild(personal_memories_enabled=footer != "personalization_off")
    alice_user_id, alice = await world.user()
    await world.member(scene.server, alice, "alice_w", display_name="Alice")
    if footer == "blacklisted":
        await world.blacklist(scene.server, alice_user_id)
    memory_id = await pipeline.personal_memory(alice_user_id, 0, "{user} likes {bot}")
    call = scene.call({"memory_id": memory_id, "memory_content": "", "target_user": "alice"})

    processed = await pipeline.run(call)

    assert_result(processed, call, MemoryStatus.DELETED)
    embed_row = next(row for row in processed.outbox if row.event_type == "embed.requested")
    embed = decode_event(embed_row.body)
    assert isinstance(embed, EmbedRequested)
    assert "Alice" in embed.embed.title
    # {user} is the owner in a personal memory, {bot} the persona.
    assert "Alice likes Tomori" in embed.embed.description
    footer_text = embed.embed.footer or ""
    assert ("/memory personal" in footer_text) is (footer == "enabled")
    assert ("off" in footer_text) is (footer == "personalization_off")
    assert ("excluded" in footer_text) is (footer == "blacklisted")
