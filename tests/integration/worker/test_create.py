"""The create tool through the real database: every status of docs/behaviour.md, the rows and the
events of a saved memory, and a batch's creations of one scope.

(`memory_save_failed_db_error` needs an unreachable database, and two workers racing need
processes: both are tested end to end, in tests/e2e/test_create.py.)
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from contracts import (
    REMEMBER_THIS_FACT,
    EmbedRequested,
    MemoryCreated,
    MemoryStatus,
    Participant,
    decode_event,
)
from harness.snowflake import snowflake
from harness.world import participant
from infra.storage.engine import create_engine
from tests.integration.worker.checks import (
    Pipeline,
    Scene,
    assert_failure,
    assert_result,
    assert_success_events,
    single_revision,
)
from worker.adapters.memory_store import MemoryStore

BOT_ID = "100000000000000001"  # tool_call's default bot_user_id


def server_wide(content: str) -> dict[str, Any]:
    return {"memory_content": content, "memory_scope": "server_wide"}


def about(target: str, content: str) -> dict[str, Any]:
    return {"memory_content": content, "memory_scope": "target_user", "target_user": target}


async def scope_contents(pipeline: Pipeline, scene: Scene) -> list[str]:
    rows = await pipeline.sql(
        "SELECT content FROM server_memories WHERE server_id = %s AND persona_lineage_id = %s"
        " ORDER BY server_memory_id",
        scene.server.server_id,
        scene.persona.lineage,
    )
    return [row["content"] for row in rows]


async def personal_contents(pipeline: Pipeline, owner_user_id: int) -> list[str]:
    rows = await pipeline.sql(
        "SELECT content FROM personal_memories WHERE user_id = %s ORDER BY personal_memory_id",
        owner_user_id,
    )
    return [row["content"] for row in rows]


# -- saved ---------------------------------------------------------------------------------


@pytest.mark.parametrize("tool_name", ["create_long_term_memory", REMEMBER_THIS_FACT])
async def test_a_server_memory_is_saved_with_its_revision_and_events(
    pipeline: Pipeline, tool_name: str
) -> None:
    scene = await pipeline.guild()
    call = scene.call(server_wide("  {user} hosts movie night  "), tool_name=tool_name)

    processed = await pipeline.run(call)

    result = assert_result(processed, call, MemoryStatus.SAVED)
    assert result.tool_name == tool_name
    memory_id = result.data.memory_id
    assert memory_id is not None
    assert result.data.model_dump(mode="json") == {
        "scope": "server_wide",
        "memory_id": memory_id,
        "content_saved": "{user} hosts movie night",
    }
    row = await pipeline.row(memory_id)
    assert row is not None
    assert (row["scope"], row["content"], row["server_id"], row["persona_lineage_id"]) == (
        "server_wide",
        "{user} hosts movie night",
        scene.server.server_id,
        scene.persona.lineage,
    )
    assert row["teacher"] == scene.triggerer_user_id
    assert row["tags"] == []
    [persona] = await pipeline.sql(
        "SELECT persona_id FROM server_memories WHERE server_memory_id = %s", memory_id
    )
    assert persona["persona_id"] == scene.persona.persona_id
    revision = await single_revision(
        pipeline.world,
        call,
        memory_id=memory_id,
        scope="server_wide",
        action="created",
        before="",
        after="{user} hosts movie night",
        server_id=scene.server.server_id,
        owner_user_id=None,
        lineage=scene.persona.lineage,
    )
    await assert_success_events(
        pipeline.world,
        processed,
        call,
        revision=revision,
        cache="persona_state",
        cache_key=scene.server.disc_id,
    )
    embed = decode_event(bytes((await pipeline.world.outbox_of_call(call.tool_call_id))[1]["body"]))
    assert isinstance(embed, EmbedRequested)
    assert embed.embed.color == 0x2ECC71
    assert "Trig hosts movie night" in embed.embed.description


async def test_a_personal_memory_is_saved_for_its_owner(pipeline: Pipeline) -> None:
    scene = await pipeline.guild()
    alice_user_id, alice = await pipeline.world.user()
    await pipeline.world.member(scene.server, alice, "alice_w", display_name="Alice")
    call = scene.create(about("Alice", "{user} plays the violin"))

    processed = await pipeline.run(call)

    result = assert_result(processed, call, MemoryStatus.SAVED)
    memory_id = result.data.memory_id
    assert memory_id is not None
    assert result.data.model_dump(mode="json") == {
        "scope": "target_user",
        "memory_id": memory_id,
        "content_saved": "{user} plays the violin",
        "target_user": "Alice (@alice_w)",
    }
    row = await pipeline.row(memory_id)
    assert row is not None
    assert (row["scope"], row["owner"], row["persona_lineage_id"]) == (
        "target_user",
        alice_user_id,
        scene.persona.lineage,
    )
    revision = await single_revision(
        pipeline.world,
        call,
        memory_id=memory_id,
        scope="target_user",
        action="created",
        before="",
        after="{user} plays the violin",
        server_id=scene.server.server_id,
        owner_user_id=alice_user_id,
        lineage=scene.persona.lineage,
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


async def test_a_triggerer_the_bot_never_stored_teaches_nobody(pipeline: Pipeline) -> None:
    scene = await pipeline.guild()
    stranger = snowflake()
    call = scene.create(server_wide("the server has a quiz on Mondays"))
    call = call.model_copy(
        update={"context": call.context.model_copy(update={"triggerer_id": stranger})}
    )

    result = assert_result(await pipeline.run(call), call, MemoryStatus.SAVED)

    assert result.data.memory_id is not None
    row = await pipeline.row(result.data.memory_id)
    assert row is not None and row["teacher"] is None


async def test_memory_ids_come_from_the_shared_sequence(pipeline: Pipeline) -> None:
    scene = await pipeline.guild()
    before = await pipeline.server_memory(scene.persona, "seeded")
    call = scene.create(server_wide("new"))

    result = assert_result(await pipeline.run(call), call, MemoryStatus.SAVED)
    after = await pipeline.world.personal_memory(scene.triggerer_user_id, 0, "later")

    assert result.data.memory_id is not None
    assert before < result.data.memory_id < after


# -- the fallbacks ---------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["self", " @SELF ", "bot_itself", "bot_member", "bot_partner"])
async def test_a_memory_about_a_bot_is_saved_server_wide(pipeline: Pipeline, target: str) -> None:
    scene = await pipeline.guild()
    participants: tuple[Participant, ...] = ()
    query = target
    if target == "bot_itself":
        participants = (participant(BOT_ID, "Tomori"),)
        query = "Tomori"
    elif target == "bot_member":
        helper = snowflake()  # no users row: a bot needs none
        await pipeline.world.member(scene.server, helper, "helper_bot", is_bot=True)
        query = f"<@{helper}>"
    elif target == "bot_partner":
        participants = (participant(snowflake(), "Helper", is_bot=True),)
        query = "Helper"
    call = scene.create(about(query, "{bot} likes puns"), *participants)

    processed = await pipeline.run(call)

    result = assert_result(processed, call, MemoryStatus.SAVED)
    assert result.data.scope == "server_wide"
    assert result.data.fallback == "bot"
    assert result.data.target_user is None
    assert await scope_contents(pipeline, scene) == ["{bot} likes puns"]
    rows = await pipeline.world.outbox_of_call(call.tool_call_id)
    assert rows[2]["routing_key"] == f"cache.persona_state.{scene.server.disc_id}"
    assert rows[3]["routing_key"] == "memory.created.server_wide"


@pytest.mark.parametrize("query", ["@alice:matrix.org", "alice"])
async def test_a_memory_about_a_bridge_user_is_saved_server_wide_with_their_name(
    pipeline: Pipeline, query: str
) -> None:
    scene = await pipeline.guild()
    bridge = participant("@alice:matrix.org", "Alice", label="Alice (Matrix)")
    call = scene.create(about(query, "{USER} plays chess; {{user}} won twice"), bridge)

    processed = await pipeline.run(call)

    result = assert_result(processed, call, MemoryStatus.SAVED)
    assert result.data.model_dump(mode="json") == {
        "scope": "server_wide",
        "memory_id": result.data.memory_id,
        "content_saved": "Alice plays chess; Alice won twice",
        "fallback": "bridge_user",
    }
    assert await scope_contents(pipeline, scene) == ["Alice plays chess; Alice won twice"]
    [audit] = [
        decode_event(bytes(row["body"]))
        for row in await pipeline.world.outbox_of_call(call.tool_call_id)
        if row["event_type"] == "memory.created"
    ]
    assert isinstance(audit, MemoryCreated)
    assert audit.owner_id is None
    [revision] = await pipeline.world.revisions_of_call(call.tool_call_id)
    assert (revision["revision_id"], revision["content_before"], revision["content_after"]) == (
        audit.revision_id,
        "",
        "Alice plays chess; Alice won twice",
    )


# -- every failure status ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "arguments",
    [
        None,
        "remember that",
        ["memory_content"],
        {"memory_scope": "server_wide"},
        {"memory_content": 5, "memory_scope": "server_wide"},
        {"memory_content": "x"},
        {"memory_content": "x", "memory_scope": "guild"},
        {"memory_content": "x", "memory_scope": ["server_wide"]},
        {"memory_content": "x", "memory_scope": "target_user"},
        {"memory_content": "x", "memory_scope": "target_user", "target_user": "  "},
        {"memory_content": "x", "memory_scope": "target_user", "target_user": 3},
    ],
)
async def test_invalid_args(pipeline: Pipeline, arguments: Any) -> None:
    scene = await pipeline.guild()
    call = scene.create(arguments)

    result = await assert_failure(
        pipeline.world, await pipeline.run(call), call, MemoryStatus.SAVE_INVALID_ARGS
    )

    assert result.data.model_dump() == {}
    assert await scope_contents(pipeline, scene) == []


@pytest.mark.parametrize("problem", ["unknown_persona", "other_servers_persona", "lineage_0"])
async def test_internal_error(pipeline: Pipeline, problem: str) -> None:
    scene = await pipeline.guild()
    persona_id = None
    if problem == "unknown_persona":
        persona_id = 2_000_000_000
    elif problem == "other_servers_persona":
        persona_id = (await pipeline.guild()).persona.persona_id
    else:
        persona_id = (await pipeline.world.persona(scene.server, lineage=0)).persona_id
    call = scene.create(server_wide("x"), persona_id=persona_id)

    await assert_failure(
        pipeline.world, await pipeline.run(call), call, MemoryStatus.SAVE_INTERNAL_ERROR
    )
    rows = await pipeline.sql(
        "SELECT 1 FROM server_memories WHERE server_id = %s", scene.server.server_id
    )
    assert rows == []


async def test_internal_error_for_an_unknown_server(pipeline: Pipeline) -> None:
    scene = await pipeline.guild()
    call = scene.create(server_wide("x"))
    call = call.model_copy(
        update={"context": call.context.model_copy(update={"guild_id": snowflake()})}
    )

    await assert_failure(
        pipeline.world, await pipeline.run(call), call, MemoryStatus.SAVE_INTERNAL_ERROR
    )


@pytest.mark.parametrize("where", ["guild", "dm"])
async def test_disabled(pipeline: Pipeline, where: str) -> None:
    scene = await (pipeline.guild if where == "guild" else pipeline.dm)(self_teaching_enabled=False)
    call = scene.create(server_wide("x"))

    await assert_failure(pipeline.world, await pipeline.run(call), call, MemoryStatus.SAVE_DISABLED)

    assert await scope_contents(pipeline, scene) == []


@pytest.mark.parametrize("content", ["", "   \n ", "x" * 11, "nul\x00here"])
async def test_invalid_content(pipeline: Pipeline, content: str) -> None:
    scene = await pipeline.guild()
    call = scene.create(server_wide(content))

    await assert_failure(
        pipeline.world,
        await pipeline.run(call, max_memory_length=10),
        call,
        MemoryStatus.SAVE_INVALID_CONTENT,
    )
    assert await scope_contents(pipeline, scene) == []


async def test_invalid_content_when_a_bridge_users_name_makes_it_too_long(
    pipeline: Pipeline,
) -> None:
    scene = await pipeline.guild()
    bridge = participant("@bartholomew:matrix.org", "Bartholomew", label="Bartholomew (Matrix)")
    call = scene.create(about("Bartholomew", "{user} {user}"), bridge)

    await assert_failure(
        pipeline.world,
        await pipeline.run(call, max_memory_length=20),
        call,
        MemoryStatus.SAVE_INVALID_CONTENT,
    )


async def test_ambiguous_user(pipeline: Pipeline) -> None:
    scene = await pipeline.guild()
    for username in ("sam_b", "sam_a"):
        await pipeline.world.member(scene.server, snowflake(), username, display_name="Sam")

    await assert_failure(
        pipeline.world,
        await pipeline.run(call := scene.create(about("sam", "x"))),
        call,
        MemoryStatus.SAVE_AMBIGUOUS_USER,
        {"candidates": ["Sam (@sam_a)", "Sam (@sam_b)"]},
    )


@pytest.mark.parametrize("who", ["nobody", "unknown_mention", "never_stored"])
async def test_user_not_found(pipeline: Pipeline, who: str) -> None:
    scene = await pipeline.guild()
    query = "Nobody"
    if who == "unknown_mention":
        query = f"<@{snowflake()}>"
    elif who == "never_stored":
        newbie = snowflake()  # a member with no users row
        await pipeline.world.member(scene.server, newbie, "newbie", display_name="Newbie")
        query = "Newbie"
    call = scene.create(about(query, "x"))

    result = await assert_failure(
        pipeline.world, await pipeline.run(call), call, MemoryStatus.SAVE_USER_NOT_FOUND
    )
    if who == "never_stored":
        assert "Newbie" in result.message


async def test_invalid_scope_for_someone_not_a_member(pipeline: Pipeline) -> None:
    scene = await pipeline.guild()
    _, gone = await pipeline.world.user()
    call = scene.create(about("Gone", "x"), participant(gone, "Gone", is_member=False))

    await assert_failure(
        pipeline.world, await pipeline.run(call), call, MemoryStatus.SAVE_INVALID_SCOPE
    )


async def test_invalid_scope_for_someone_else_in_a_dm(pipeline: Pipeline) -> None:
    scene = await pipeline.dm()
    other_user_id, other = await pipeline.world.user()
    call = scene.create(about("Friend", "x"), participant(other, "Friend"))

    await assert_failure(
        pipeline.world, await pipeline.run(call), call, MemoryStatus.SAVE_INVALID_SCOPE
    )
    assert await personal_contents(pipeline, other_user_id) == []


async def test_in_a_dm_the_triggerer_may_get_a_personal_memory(pipeline: Pipeline) -> None:
    scene = await pipeline.dm()
    call = scene.create(about("Trig", "{user} is learning Go"))

    result = assert_result(await pipeline.run(call), call, MemoryStatus.SAVED)

    assert result.data.scope == "target_user"
    assert await personal_contents(pipeline, scene.triggerer_user_id) == ["{user} is learning Go"]


@pytest.mark.parametrize("privacy_level", [1, 2])
async def test_privacy_restricted(pipeline: Pipeline, privacy_level: int) -> None:
    scene = await pipeline.guild()
    private_user_id, private = await pipeline.world.user(privacy_level=privacy_level)
    await pipeline.world.member(scene.server, private, "priv", display_name="Private")
    call = scene.create(about("Private", "x"))

    result = await assert_failure(
        pipeline.world, await pipeline.run(call), call, MemoryStatus.SAVE_PRIVACY_RESTRICTED
    )
    assert "Private" in result.message
    assert await personal_contents(pipeline, private_user_id) == []


async def test_duplicate_of_a_server_memory(pipeline: Pipeline) -> None:
    scene = await pipeline.guild()
    existing = await pipeline.server_memory(scene.persona, "Movie night is on  Fridays")
    other_lineage = await pipeline.server_memory(
        scene.persona, "likes tea", lineage=scene.persona.lineage + 1
    )
    call = scene.create(server_wide("  movie NIGHT is on fridays "))

    await assert_failure(
        pipeline.world,
        await pipeline.run(call),
        call,
        MemoryStatus.SAVE_DUPLICATE,
        {"scope": "server_wide", "memory_id": existing},
    )
    # Another lineage's memory is another scope: no duplicate there.
    again = scene.create(server_wide("Likes tea"))
    assert_result(await pipeline.run(again), again, MemoryStatus.SAVED)
    assert await pipeline.world.content(other_lineage) == "likes tea"


@pytest.mark.parametrize("lineage", ["persona", "global"])
async def test_duplicate_of_a_personal_memory(pipeline: Pipeline, lineage: str) -> None:
    scene = await pipeline.guild()
    alice_user_id, alice = await pipeline.world.user()
    await pipeline.world.member(scene.server, alice, "alice", display_name="Alice")
    existing = await pipeline.personal_memory(
        alice_user_id, scene.persona.lineage if lineage == "persona" else 0, "{user} owns a cat"
    )
    call = scene.create(about("Alice", "{USER} owns a CAT"))

    await assert_failure(
        pipeline.world,
        await pipeline.run(call),
        call,
        MemoryStatus.SAVE_DUPLICATE,
        {"scope": "target_user", "memory_id": existing, "target_user": "Alice"},
    )


async def test_limit_of_server_memories(pipeline: Pipeline) -> None:
    scene = await pipeline.guild()
    for n in range(3):
        await pipeline.server_memory(scene.persona, f"fact {n}")
    await pipeline.server_memory(scene.persona, "elsewhere", lineage=scene.persona.lineage + 1)
    call = scene.create(server_wide("one too many"))

    result = await assert_failure(
        pipeline.world,
        await pipeline.run(call, max_server_memories=3),
        call,
        MemoryStatus.SAVE_LIMIT_EXCEEDED,
        {"scope": "server_wide", "current_count": 3, "max_allowed": 3},
    )
    assert "3" in result.message
    assert len(await scope_contents(pipeline, scene)) == 3


async def test_limit_of_personal_memories_counts_the_global_ones(pipeline: Pipeline) -> None:
    scene = await pipeline.guild()
    alice_user_id, alice = await pipeline.world.user()
    await pipeline.world.member(scene.server, alice, "alice", display_name="Alice")
    await pipeline.personal_memory(alice_user_id, scene.persona.lineage, "one")
    await pipeline.personal_memory(alice_user_id, 0, "two")
    await pipeline.personal_memory(alice_user_id, scene.persona.lineage + 1, "not counted")
    call = scene.create(about("Alice", "three"))

    await assert_failure(
        pipeline.world,
        await pipeline.run(call, max_personal_memories=2),
        call,
        MemoryStatus.SAVE_LIMIT_EXCEEDED,
        {"scope": "target_user", "target_user": "Alice", "current_count": 2, "max_allowed": 2},
    )
    fits = scene.create(about("Alice", "three"))
    assert_result(await pipeline.run(fits, max_personal_memories=3), fits, MemoryStatus.SAVED)


async def test_the_first_failing_step_decides(pipeline: Pipeline) -> None:
    scene = await pipeline.guild(self_teaching_enabled=False)
    steps = [
        (scene.create({"memory_content": "", "memory_scope": "x"}), MemoryStatus.SAVE_INVALID_ARGS),
        (
            scene.create(server_wide(""), persona_id=2_000_000_000),
            MemoryStatus.SAVE_INTERNAL_ERROR,
        ),
        (scene.create(about("nobody", "")), MemoryStatus.SAVE_DISABLED),
    ]
    for call, status in steps:
        await assert_failure(pipeline.world, await pipeline.run(call), call, status)
    enabled = await pipeline.guild()
    content_first = enabled.create(about("nobody", ""))
    await assert_failure(
        pipeline.world,
        await pipeline.run(content_first),
        content_first,
        MemoryStatus.SAVE_INVALID_CONTENT,
    )


# -- batches and races -------------------------------------------------------------------------


async def test_a_batch_of_creations_of_one_scope_stops_at_the_limit(pipeline: Pipeline) -> None:
    scene = await pipeline.guild()
    await pipeline.server_memory(scene.persona, "seeded")
    texts = ["a", "b", " A ", "c", "d", "B", "e", "f"]
    # Both names of the tool, alternately: one tool, one scope, one order.
    calls = [
        scene.create(server_wide(text), tool_name=REMEMBER_THIS_FACT)
        if n % 2
        else scene.create(server_wide(text))
        for n, text in enumerate(texts)
    ]

    results = await pipeline.run_together(calls, max_server_memories=4)

    assert [r.result.status for r in results] == [
        MemoryStatus.SAVED,
        MemoryStatus.SAVED,
        MemoryStatus.SAVE_DUPLICATE,
        MemoryStatus.SAVED,
        MemoryStatus.SAVE_LIMIT_EXCEEDED,
        MemoryStatus.SAVE_DUPLICATE,
        MemoryStatus.SAVE_LIMIT_EXCEEDED,
        MemoryStatus.SAVE_LIMIT_EXCEEDED,
    ]
    assert results[2].result.data.memory_id == results[0].result.data.memory_id
    assert results[4].result.data.current_count == 4
    assert await scope_contents(pipeline, scene) == ["seeded", "a", "b", "c"]
    assert [len(r.outbox) for r in results] == [4, 4, 1, 4, 1, 1, 1, 1]


async def test_a_batch_mixes_creations_and_updates(pipeline: Pipeline) -> None:
    scene = await pipeline.guild()
    memory_id = await pipeline.server_memory(scene.persona, "v0")
    calls = [
        scene.call({"memory_id": memory_id, "memory_content": "v1"}),
        scene.create(server_wide("new fact")),
        scene.call({"memory_id": "x", "memory_content": "v2"}),
        scene.create(server_wide("V1")),
    ]

    results = await pipeline.run_together(calls)

    assert [r.result.status for r in results] == [
        MemoryStatus.UPDATED,
        MemoryStatus.SAVED,
        MemoryStatus.INVALID_ARGS,
        MemoryStatus.SAVE_DUPLICATE,  # the update ran first in the batch
    ]
    assert [r.result.tool_call_id for r in results] == [c.tool_call_id for c in calls]
    assert results[3].result.data.memory_id == memory_id


@pytest.mark.parametrize("scope", ["server_wide", "target_user"])
async def test_two_transactions_at_the_limit_take_turns(
    pipeline: Pipeline, settings: Any, scope: str
) -> None:
    """Two batches at once on two connections, each free to save by what it read first: the
    scope's lock makes the second read what the first saved."""
    scene = await pipeline.guild()
    owner_user_id, owner = await pipeline.world.user()
    await pipeline.world.member(scene.server, owner, "olive", display_name="Olive")

    def create(text: str) -> Any:
        return scene.create(server_wide(text) if scope == "server_wide" else about("Olive", text))

    await pipeline.server_memory(scene.persona, "seeded")
    await pipeline.personal_memory(owner_user_id, 0, "seeded")
    others = MemoryStore(create_engine(settings.sqlalchemy_url, pool_size=2))
    try:
        first = [create(f"first {n}") for n in range(3)] + [create("said by both")]
        second = [create(f"second {n}") for n in range(3)] + [create("Said by BOTH")]
        results = await asyncio.gather(
            pipeline.run_together(first, max_server_memories=5, max_personal_memories=5),
            pipeline.run_together(
                second, store=others, max_server_memories=5, max_personal_memories=5
            ),
        )
    finally:
        await others.close()

    contents = (
        await scope_contents(pipeline, scene)
        if scope == "server_wide"
        else await personal_contents(pipeline, owner_user_id)
    )
    assert len(contents) == 5
    assert len({" ".join(text.split()).casefold() for text in contents}) == 5
    statuses = [r.result.status for batch in results for r in batch]
    assert statuses.count(MemoryStatus.SAVED) == 4
    assert statuses.count(MemoryStatus.SAVE_LIMIT_EXCEEDED) == 3
    assert statuses.count(MemoryStatus.SAVE_DUPLICATE) == 1


async def test_a_used_tool_call_id_is_refused_in_the_create_tools_family(
    pipeline: Pipeline,
) -> None:
    scene = await pipeline.guild()
    first = scene.create(server_wide("the first text"))
    assert_result(await pipeline.run(first), first, MemoryStatus.SAVED)
    reused = scene.create(server_wide("another text"), tool_call_id=first.tool_call_id)

    processed = await pipeline.run(reused)

    assert processed.reused_id and processed.outbox == []
    assert processed.result.status is MemoryStatus.SAVE_INVALID_ARGS
    assert processed.result.data.reason == "tool_call_id_reused"
    assert await scope_contents(pipeline, scene) == ["the first text"]
    again = await pipeline.run(first)
    assert again.replayed and again.result.status is MemoryStatus.SAVED


async def test_a_batch_runs_its_updates_before_its_creations_whatever_came_first(
    pipeline: Pipeline,
) -> None:
    """One order of locks for every batch (memory rows, then scope anchors), so that two
    workers' mixed batches never wait on each other in a circle."""
    scene = await pipeline.guild()
    memory_id = await pipeline.server_memory(scene.persona, "v0")
    calls = [
        scene.create(server_wide("V1")),
        scene.call({"memory_id": memory_id, "memory_content": "v1"}),
    ]

    results = await pipeline.run_together(calls)

    assert [r.result.status for r in results] == [
        MemoryStatus.SAVE_DUPLICATE,
        MemoryStatus.UPDATED,
    ]
    assert results[0].result.data.memory_id == memory_id
