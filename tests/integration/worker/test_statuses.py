"""Every failure status (docs/behaviour.md) through the real database: answered, recorded, no write.

(`memory_update_failed_db_error` needs an unreachable database; it is tested end to end.)
"""

from __future__ import annotations

from typing import Any

import pytest

from contracts import MemoryStatus, Participant
from harness.snowflake import snowflake
from harness.world import participant
from tests.integration.worker.checks import (
    Pipeline,
    assert_failure,
    assert_result,
    single_revision,
)

BOT_ID = "100000000000000001"  # tool_call's default bot_user_id


@pytest.mark.parametrize(
    "arguments",
    [
        {"memory_content": "x"},
        {"memory_id": "{id}", "memory_content": "x"},
        {"memory_id": True, "memory_content": "x"},
        {"memory_id": 24.5, "memory_content": "x"},
        {"memory_id": 0, "memory_content": "x"},
        {"memory_id": -3, "memory_content": "x"},
        {"memory_id": None, "memory_content": "x"},
        {"memory_id": 2**53, "memory_content": "x"},
        {"memory_id": "ID", "memory_content": None},
        {"memory_id": "ID"},
        {"memory_id": "ID", "memory_content": 5},
        {"memory_id": "ID", "memory_content": "x", "target_user": 7},
        {"memory_id": "ID", "memory_content": "x", "target_user_nickname": ["a"]},
        {"memory_id": "ID", "memory_content": "x", "target_user_discord_id": 123},
        ["memory_id", "memory_content"],
        "update memory ID",
        None,
    ],
    ids=[
        "id_missing",
        "id_string",
        "id_true",
        "id_fraction",
        "id_zero",
        "id_negative",
        "id_null",
        "id_too_large",
        "content_null",
        "content_missing",
        "content_number",
        "target_user_number",
        "legacy_nickname_list",
        "legacy_id_number",
        "arguments_list",
        "arguments_string",
        "arguments_null",
    ],
)
async def test_invalid_args(pipeline: Pipeline, arguments: Any) -> None:
    scene = await pipeline.guild()
    memory_id = await pipeline.server_memory(scene.persona, "kept")

    def fill(value: Any) -> Any:
        if value == "ID":
            return memory_id
        if value == "{id}":
            return str(memory_id)  # "24": a string, not a JSON integer
        return value

    if isinstance(arguments, dict):
        arguments = {key: fill(value) for key, value in arguments.items()}
    call = scene.call(arguments)

    result = await assert_failure(
        pipeline.world, await pipeline.run(call), call, MemoryStatus.INVALID_ARGS
    )

    assert result.data.model_dump() == {}
    assert await pipeline.world.content(memory_id) == "kept"


async def test_invalid_content(pipeline: Pipeline) -> None:
    scene = await pipeline.guild()
    memory_id = await pipeline.server_memory(scene.persona, "kept")
    call = scene.call({"memory_id": memory_id, "memory_content": "eleven char"})

    processed = await pipeline.run(call, max_memory_length=10)

    result = await assert_failure(pipeline.world, processed, call, MemoryStatus.INVALID_CONTENT)
    assert "10" in result.message
    assert await pipeline.world.content(memory_id) == "kept"


@pytest.mark.parametrize("content", ["\u200b", " \u2060\ufeff ", "\u3164", "\u0301"], ids=ascii)
async def test_content_with_no_visible_character_is_refused_and_deletes_nothing(
    pipeline: Pipeline, content: str
) -> None:
    scene = await pipeline.guild()
    memory_id = await pipeline.server_memory(scene.persona, "kept")
    call = scene.call({"memory_id": memory_id, "memory_content": content})

    processed = await pipeline.run(call)

    result = await assert_failure(pipeline.world, processed, call, MemoryStatus.INVALID_CONTENT)
    assert "visible" in result.message
    assert result.data.model_dump() == {}
    assert await pipeline.world.content(memory_id) == "kept"


async def test_a_delete_is_never_too_long(pipeline: Pipeline) -> None:
    scene = await pipeline.guild()
    memory_id = await pipeline.server_memory(scene.persona, "a memory longer than the limit")
    call = scene.call({"memory_id": memory_id, "memory_content": "  "})

    assert_result(await pipeline.run(call, max_memory_length=3), call, MemoryStatus.DELETED)
    assert await pipeline.world.content(memory_id) is None


@pytest.mark.parametrize("where", ["guild", "dm"])
@pytest.mark.parametrize("personal", [False, True])
async def test_disabled(pipeline: Pipeline, where: str, personal: bool) -> None:
    scene = await (pipeline.guild if where == "guild" else pipeline.dm)(self_teaching_enabled=False)
    if personal:
        memory_id = await pipeline.personal_memory(scene.triggerer_user_id, 0, "kept")
        arguments = {"memory_id": memory_id, "memory_content": "", "target_user": "Trig"}
    else:
        memory_id = await pipeline.server_memory(scene.persona, "kept")
        arguments = {"memory_id": memory_id, "memory_content": "changed"}
    call = scene.call(arguments)

    await assert_failure(pipeline.world, await pipeline.run(call), call, MemoryStatus.DISABLED)

    assert await pipeline.world.content(memory_id) == "kept"


async def test_disabled_is_read_at_processing_time(pipeline: Pipeline) -> None:
    scene = await pipeline.guild(self_teaching_enabled=True)
    memory_id = await pipeline.server_memory(scene.persona, "kept")
    await pipeline.world.set_self_teaching(scene.server, False)
    off = scene.call({"memory_id": memory_id, "memory_content": "changed"})
    await assert_failure(pipeline.world, await pipeline.run(off), off, MemoryStatus.DISABLED)

    await pipeline.world.set_self_teaching(scene.server, True)
    on = scene.call({"memory_id": memory_id, "memory_content": "changed"})
    assert_result(await pipeline.run(on), on, MemoryStatus.UPDATED)
    assert await pipeline.world.content(memory_id) == "changed"


@pytest.mark.parametrize("privacy_level", [1, 2])
async def test_privacy_restricted_update_but_delete_allowed(
    pipeline: Pipeline, privacy_level: int
) -> None:
    scene = await pipeline.guild()
    alice_user_id, alice = await pipeline.world.user(privacy_level=privacy_level)
    await pipeline.world.member(scene.server, alice, "alice_w", display_name="Alice")
    memory_id = await pipeline.personal_memory(alice_user_id, scene.persona.lineage, "kept")
    update = scene.call({"memory_id": memory_id, "memory_content": "new", "target_user": "Alice"})

    result = await assert_failure(
        pipeline.world, await pipeline.run(update), update, MemoryStatus.PRIVACY_RESTRICTED
    )
    assert "Alice" in result.message
    assert await pipeline.world.content(memory_id) == "kept"

    delete = scene.call({"memory_id": memory_id, "memory_content": "", "target_user": "Alice"})
    assert_result(await pipeline.run(delete), delete, MemoryStatus.DELETED)
    assert await pipeline.world.content(memory_id) is None
    await single_revision(
        pipeline.world,
        delete,
        memory_id=memory_id,
        scope="target_user",
        action="deleted",
        before="kept",
        after=None,
        server_id=scene.server.server_id,
        owner_user_id=alice_user_id,
        lineage=scene.persona.lineage,
    )


async def test_invalid_scope_target_not_a_current_member(pipeline: Pipeline) -> None:
    scene = await pipeline.guild()
    gone_user_id, gone = await pipeline.world.user()
    memory_id = await pipeline.personal_memory(gone_user_id, 0, "kept")
    # Not in guild_members, and the bot saw them as no longer a member.
    call = scene.call(
        {"memory_id": memory_id, "memory_content": "", "target_user": "Gone"},
        participant(gone, "Gone", is_member=False),
    )

    await assert_failure(pipeline.world, await pipeline.run(call), call, MemoryStatus.INVALID_SCOPE)
    assert await pipeline.world.content(memory_id) == "kept"


async def test_a_participant_seen_as_member_is_a_current_member(pipeline: Pipeline) -> None:
    """Not yet in guild_members, but the bot saw them as a member: reachable."""
    scene = await pipeline.guild()
    new_user_id, new = await pipeline.world.user()
    memory_id = await pipeline.personal_memory(new_user_id, 0, "old")
    call = scene.call(
        {"memory_id": memory_id, "memory_content": "new", "target_user": "Newcomer"},
        participant(new, "Newcomer"),
    )

    assert_result(await pipeline.run(call), call, MemoryStatus.UPDATED)
    assert await pipeline.world.content(memory_id) == "new"


async def test_invalid_scope_dm_target_other_than_the_triggerer(pipeline: Pipeline) -> None:
    scene = await pipeline.dm()
    other_user_id, other = await pipeline.world.user()
    memory_id = await pipeline.personal_memory(other_user_id, 0, "kept")
    call = scene.call(
        {"memory_id": memory_id, "memory_content": "", "target_user": "Friend"},
        participant(other, "Friend"),
    )

    await assert_failure(pipeline.world, await pipeline.run(call), call, MemoryStatus.INVALID_SCOPE)
    assert await pipeline.world.content(memory_id) == "kept"


@pytest.mark.parametrize("query", ["@alice:matrix.org", "  @Alice:Matrix.org ", "Alice"])
async def test_invalid_scope_matrix_bridge_user(pipeline: Pipeline, query: str) -> None:
    scene = await pipeline.guild()
    memory_id = await pipeline.server_memory(scene.persona, "kept")
    call = scene.call(
        {"memory_id": memory_id, "memory_content": "", "target_user": query},
        participant("@alice:matrix.org", "Alice", label="Alice [matrix]"),
    )

    await assert_failure(pipeline.world, await pipeline.run(call), call, MemoryStatus.INVALID_SCOPE)
    assert await pipeline.world.content(memory_id) == "kept"


async def test_ambiguous_user_among_participants(pipeline: Pipeline) -> None:
    scene = await pipeline.guild()
    world = pipeline.world
    sam_one_user_id, sam_one = await world.user()
    _, sam_two = await world.user()
    memory_id = await pipeline.personal_memory(sam_one_user_id, 0, "kept")
    call = scene.call(
        {"memory_id": memory_id, "memory_content": "new", "target_user": "sam"},
        participant(sam_one, "Sam", label="Sam (@sam_one)"),
        participant(sam_two, "sam", label="Sam (@sam_two)"),
    )

    result = await assert_failure(
        world,
        await pipeline.run(call),
        call,
        MemoryStatus.AMBIGUOUS_USER,
        {"candidates": ["Sam (@sam_one)", "Sam (@sam_two)"]},
    )
    assert "Sam (@sam_one)" in result.message
    assert "Sam (@sam_two)" in result.message
    assert await world.content(memory_id) == "kept"


async def test_ambiguous_user_in_the_directory_offers_at_most_three(pipeline: Pipeline) -> None:
    scene = await pipeline.guild()
    world = pipeline.world
    for username in ("max_d", "max_a", "max_c", "max_b"):
        await world.member(scene.server, snowflake(), username, display_name="Max")
    memory_id = await pipeline.server_memory(scene.persona, "kept")
    call = scene.call({"memory_id": memory_id, "memory_content": "new", "target_user": "MAX"})

    await assert_failure(
        world,
        await pipeline.run(call),
        call,
        MemoryStatus.AMBIGUOUS_USER,
        {"candidates": ["Max (@max_a)", "Max (@max_b)", "Max (@max_c)"]},
    )
    assert await world.content(memory_id) == "kept"


async def test_user_not_found_nobody_matches(pipeline: Pipeline) -> None:
    scene = await pipeline.guild()
    memory_id = await pipeline.server_memory(scene.persona, "kept")
    call = scene.call({"memory_id": memory_id, "memory_content": "new", "target_user": "Nobody"})

    await assert_failure(
        pipeline.world, await pipeline.run(call), call, MemoryStatus.USER_NOT_FOUND
    )
    assert await pipeline.world.content(memory_id) == "kept"


@pytest.mark.parametrize("query", ["<@{id}>", "{id}"])
async def test_user_not_found_for_an_unknown_mention(pipeline: Pipeline, query: str) -> None:
    """A mention or bare id of nobody here is never matched by name."""
    scene = await pipeline.guild()
    stranger_user_id, stranger = await pipeline.world.user()
    memory_id = await pipeline.personal_memory(stranger_user_id, 0, "kept")
    call = scene.call(
        {
            "memory_id": memory_id,
            "memory_content": "",
            "target_user": query.format(id=stranger),
        }
    )

    await assert_failure(
        pipeline.world, await pipeline.run(call), call, MemoryStatus.USER_NOT_FOUND
    )
    assert await pipeline.world.content(memory_id) == "kept"


async def test_user_not_found_when_resolved_but_never_stored(pipeline: Pipeline) -> None:
    scene = await pipeline.guild()
    unknown = snowflake()  # a member with no users row
    await pipeline.world.member(scene.server, unknown, "newbie", display_name="Newbie")
    memory_id = await pipeline.server_memory(scene.persona, "kept")
    call = scene.call({"memory_id": memory_id, "memory_content": "new", "target_user": "Newbie"})

    result = await assert_failure(
        pipeline.world, await pipeline.run(call), call, MemoryStatus.USER_NOT_FOUND
    )
    assert "Newbie" in result.message
    assert await pipeline.world.content(memory_id) == "kept"


@pytest.mark.parametrize("target", ["bot_itself", "bot_participant", "bot_member"])
async def test_invalid_target(pipeline: Pipeline, target: str) -> None:
    scene = await pipeline.guild()
    world = pipeline.world
    # Each account has a users row: the refusal is for being a bot, not for being unknown.
    bot_account = BOT_ID if target == "bot_itself" else snowflake()
    if target != "bot_itself":
        await world.user(bot_account)
    participants: tuple[Participant, ...] = ()
    if target == "bot_member":
        await world.member(scene.server, bot_account, "helper_bot", is_bot=True)
        query = f"<@{bot_account}>"
    elif target == "bot_participant":
        participants = (participant(bot_account, "Helper", is_bot=True),)
        query = "Helper"
    else:
        participants = (participant(BOT_ID, "Tomori"),)
        query = "Tomori"
    memory_id = await pipeline.server_memory(scene.persona, "kept")
    call = scene.call(
        {"memory_id": memory_id, "memory_content": "", "target_user": query}, *participants
    )

    await assert_failure(world, await pipeline.run(call), call, MemoryStatus.INVALID_TARGET)
    assert await world.content(memory_id) == "kept"


async def test_internal_error_unknown_persona(pipeline: Pipeline) -> None:
    scene = await pipeline.guild()
    memory_id = await pipeline.server_memory(scene.persona, "kept")
    call = scene.call({"memory_id": memory_id, "memory_content": "new"}, persona_id=2_000_000_000)

    await assert_failure(
        pipeline.world, await pipeline.run(call), call, MemoryStatus.INTERNAL_ERROR
    )
    assert await pipeline.world.content(memory_id) == "kept"


async def test_internal_error_persona_of_another_server(pipeline: Pipeline) -> None:
    scene = await pipeline.guild()
    other = await pipeline.guild()
    # The persona exists, but belongs to another server than the call's guild.
    memory_id = await pipeline.server_memory(scene.persona, "kept")
    theirs = await pipeline.server_memory(other.persona, "theirs")
    call = scene.call(
        {"memory_id": memory_id, "memory_content": "new"}, persona_id=other.persona.persona_id
    )

    await assert_failure(
        pipeline.world, await pipeline.run(call), call, MemoryStatus.INTERNAL_ERROR
    )
    assert await pipeline.world.content(memory_id) == "kept"
    assert await pipeline.world.content(theirs) == "theirs"


async def test_internal_error_unknown_server(pipeline: Pipeline) -> None:
    scene = await pipeline.guild()
    memory_id = await pipeline.server_memory(scene.persona, "kept")
    call = scene.call({"memory_id": memory_id, "memory_content": "new"})
    call = call.model_copy(
        update={"context": call.context.model_copy(update={"guild_id": snowflake()})}
    )

    await assert_failure(
        pipeline.world, await pipeline.run(call), call, MemoryStatus.INTERNAL_ERROR
    )
    assert await pipeline.world.content(memory_id) == "kept"


@pytest.mark.parametrize(
    ("disabled", "persona", "arguments", "status"),
    [
        (True, "unknown", {"memory_id": "1", "memory_content": "x"}, MemoryStatus.INVALID_ARGS),
        (True, "unknown", {"memory_id": 1, "memory_content": "x"}, MemoryStatus.INTERNAL_ERROR),
        (True, "own", {"memory_id": 1, "memory_content": "far too long"}, MemoryStatus.DISABLED),
        (
            False,
            "own",
            {"memory_id": 1, "memory_content": "far too long", "target_user": "Nobody"},
            MemoryStatus.INVALID_CONTENT,
        ),
        (
            False,
            "own",
            {"memory_id": 1, "memory_content": "short", "target_user": "Nobody"},
            MemoryStatus.USER_NOT_FOUND,
        ),
    ],
    ids=["args_first", "then_server_state", "then_flag", "then_content", "then_target"],
)
async def test_the_first_failing_step_decides(
    pipeline: Pipeline,
    disabled: bool,
    persona: str,
    arguments: dict[str, Any],
    status: MemoryStatus,
) -> None:
    scene = await pipeline.guild(self_teaching_enabled=not disabled)
    call = scene.call(arguments, persona_id=2_000_000_000 if persona == "unknown" else None)

    await assert_failure(
        pipeline.world, await pipeline.run(call, max_memory_length=5), call, status
    )


async def test_a_bot_member_is_not_found_by_name(pipeline: Pipeline) -> None:
    """The directory's name stages skip bots: a bot is only reached by its mention."""
    scene = await pipeline.guild()
    bot = snowflake()
    await pipeline.world.user(bot)
    await pipeline.world.member(scene.server, bot, "helper_bot", display_name="Helper", is_bot=True)
    memory_id = await pipeline.server_memory(scene.persona, "kept")
    call = scene.call({"memory_id": memory_id, "memory_content": "", "target_user": "Helper"})

    await assert_failure(
        pipeline.world, await pipeline.run(call), call, MemoryStatus.USER_NOT_FOUND
    )
    assert await pipeline.world.content(memory_id) == "kept"


async def test_calling_again_with_a_candidate_label_resolves_it(pipeline: Pipeline) -> None:
    """The ambiguity message says to call again with one of the labels: that call works."""
    scene = await pipeline.guild()
    world = pipeline.world
    sams: dict[str, tuple[int, int]] = {}
    for username in ("sam_a", "sam_b"):
        user_id, disc_id = await world.user()
        await world.member(scene.server, disc_id, username, display_name="Sam")
        sams[username] = (user_id, await pipeline.personal_memory(user_id, 0, f"{username} fact"))
    _, memory_id = sams["sam_b"]
    first = scene.call({"memory_id": memory_id, "memory_content": "", "target_user": "Sam"})
    result = await assert_failure(
        world,
        await pipeline.run(first),
        first,
        MemoryStatus.AMBIGUOUS_USER,
        {"candidates": ["Sam (@sam_a)", "Sam (@sam_b)"]},
    )
    assert result.data.candidates is not None

    again = scene.call(
        {"memory_id": memory_id, "memory_content": "", "target_user": result.data.candidates[1]}
    )
    assert_result(
        await pipeline.run(again),
        again,
        MemoryStatus.DELETED,
        {
            "scope": "target_user",
            "memory_id": memory_id,
            "content_deleted": "sam_b fact",
            "target_user": "Sam (@sam_b)",
        },
    )
    assert await world.content(memory_id) is None
    assert await world.content(sams["sam_a"][1]) == "sam_a fact"
