"""`ltm audit history` and `ltm memory restore` on changes the worker made."""

from __future__ import annotations

import io
import json
from datetime import datetime

import pytest
from aio_pika.abc import AbstractChannel

from contracts import (
    CREATE_LONG_TERM_MEMORY,
    CacheInvalidate,
    MemoryRestored,
    MemoryStatus,
    ToolCallCompleted,
    Topology,
)
from harness.broker import publish_tool_call, tap_events
from harness.services import TestServices
from harness.snowflake import snowflake
from harness.world import World, participant, tool_call
from infra.settings import Settings
from ltm.commands.audit import print_history
from ltm.commands.memory import restore_and_print
from tests.support.commands import run_ltm

pytestmark = pytest.mark.usefixtures("worker_process")


async def test_restore_of_an_update_brings_back_the_earlier_content(
    channel: AbstractChannel, topology: Topology, world: World, settings: Settings
) -> None:
    server = await world.server()
    persona = await world.persona(server)
    memory_id = await world.server_memory(persona, "likes tea")
    call = tool_call(
        persona,
        {"memory_id": memory_id, "memory_content": "likes coffee"},
        triggerer_id=snowflake(),
    )
    async with tap_events(channel, topology.events_exchange) as tap:
        await publish_tool_call(channel, topology, call)
        [result] = await tap.wait_for(ToolCallCompleted, tool_call_id=call.tool_call_id)
        assert result.status is MemoryStatus.UPDATED
        [update] = await world.revisions(memory_id)

        out = io.StringIO()
        assert (
            await restore_and_print(settings, update["revision_id"], actor="ops-alice", out=out)
            == 0
        )
        [audit] = await tap.wait_for(MemoryRestored, memory_id=memory_id)
        [invalidation] = await tap.wait_for(CacheInvalidate, tool_call_id=audit.tool_call_id)

    assert await world.content(memory_id) == "likes tea"
    first, restored = await world.revisions(memory_id)
    assert first["revision_id"] == update["revision_id"]
    assert restored["action"] == "restored"
    assert restored["content_before"] == "likes coffee"
    assert restored["content_after"] == "likes tea"
    assert restored["actor_disc_id"] == "ops-alice"
    assert restored["tool_call_id"].startswith(f"restore:{update['revision_id']}:")
    assert restored["server_id"] == server.server_id
    assert restored["persona_lineage_id"] == persona.lineage
    assert audit.revision_id == restored["revision_id"] and audit.scope == "server_wide"
    assert audit.schema_version == 2  # the texts are the revision's alone
    assert invalidation.cache == "persona_state" and invalidation.key == server.disc_id
    routing = {d.routing_key for d in tap.deliveries_with(correlation_id=audit.tool_call_id)}
    assert routing == {"memory.restored.server_wide", f"cache.persona_state.{server.disc_id}"}
    assert out.getvalue().splitlines() == [
        f"memory:                       {memory_id} (server_wide)",
        f"restored as before revision:  {update['revision_id']}",
        f"new revision:                 {restored['revision_id']}",
        "content:                      likes tea",
    ]


async def test_restore_of_a_delete_recreates_the_memory_under_its_id(
    channel: AbstractChannel, topology: Topology, world: World, settings: Settings
) -> None:
    server = await world.server()
    persona = await world.persona(server)
    owner_id, owner_disc = await world.user()
    memory_id = await world.personal_memory(owner_id, 0, "plays the cello")
    triggerer = snowflake()
    call = tool_call(
        persona,
        {"memory_id": memory_id, "memory_content": "", "target_user": "Dana"},
        triggerer_id=triggerer,
        participants=(participant(triggerer, "Eve"), participant(owner_disc, "Dana")),
    )
    async with tap_events(channel, topology.events_exchange) as tap:
        await publish_tool_call(channel, topology, call)
        [result] = await tap.wait_for(ToolCallCompleted, tool_call_id=call.tool_call_id)
        assert result.status is MemoryStatus.DELETED
        assert await world.content(memory_id) is None
        [deletion] = await world.revisions(memory_id)
        assert await restore_and_print(settings, deletion["revision_id"], out=io.StringIO()) == 0
        [audit] = await tap.wait_for(MemoryRestored, memory_id=memory_id)
        [invalidation] = await tap.wait_for(CacheInvalidate, tool_call_id=audit.tool_call_id)

    row = await world.memory(memory_id)
    assert row is not None and row["scope"] == "target_user"
    assert row["content"] == "plays the cello" and row["persona_lineage_id"] == 0
    _, restored = await world.revisions(memory_id)
    assert restored["content_before"] == "" and restored["content_after"] == "plays the cello"
    assert restored["owner_user_id"] == owner_id and restored["actor_disc_id"] == "cli"
    assert audit.owner_id == owner_disc and audit.scope == "target_user"
    assert invalidation.cache == "user" and invalidation.key == owner_disc


async def test_restore_of_an_unknown_revision_is_not_found(settings: Settings) -> None:
    out, err = io.StringIO(), io.StringIO()
    assert await restore_and_print(settings, 2**40, out=out, err=err) == 3
    assert err.getvalue() == f"ltm memory restore: no revision {2**40}\n"
    assert out.getvalue() == ""


async def test_history_lists_revisions_oldest_first(
    channel: AbstractChannel,
    topology: Topology,
    world: World,
    settings: Settings,
    services: TestServices,
) -> None:
    server = await world.server()
    persona = await world.persona(server)
    memory_id = await world.server_memory(persona, "one")
    out, err = io.StringIO(), io.StringIO()
    assert await print_history(settings, memory_id, out=out, err=err) == 3
    assert out.getvalue() == ""
    assert f"memory {memory_id} has no revisions" in err.getvalue()
    calls = [
        tool_call(
            persona, {"memory_id": memory_id, "memory_content": version}, triggerer_id=snowflake()
        )
        for version in ("it's two", 'say "three"\nand more')
    ]
    async with tap_events(channel, topology.events_exchange, ["result.#"]) as tap:
        for call in calls:
            await publish_tool_call(channel, topology, call)
            await tap.wait_for(ToolCallCompleted, tool_call_id=call.tool_call_id)
    revisions = await world.revisions(memory_id)

    finished = await run_ltm(services, "audit", "history", str(memory_id))

    assert finished.code == 0, finished.stderr
    header, *rows = finished.stdout.splitlines()
    assert header.split() == [
        "REVISION", "TIME", "ACTION", "SCOPE", "ACTOR", "TOOL", "CALL", "BEFORE", "AFTER",
    ]  # fmt: skip
    assert [row.split()[0] for row in rows] == [str(r["revision_id"]) for r in revisions]
    before, after = header.index("BEFORE"), header.index("AFTER")
    # Text as text: no repr quotes, the newline escaped, every row one line.
    assert [(row[before:after].rstrip(), row[after:]) for row in rows] == [
        ("one", "it's two"),
        ("it's two", 'say "three"\\nand more'),
    ]
    for row, call in zip(rows, calls, strict=True):
        assert row[header.index("TOOL CALL") :].startswith(call.tool_call_id)
        assert row[header.index("ACTION") :].startswith("updated  server_wide")
    assert "None" not in finished.stdout


async def test_history_as_json_has_the_contents_whole(
    channel: AbstractChannel,
    topology: Topology,
    world: World,
    settings: Settings,
) -> None:
    server = await world.server()
    persona = await world.persona(server)
    memory_id = await world.server_memory(persona, "x" * 300)
    call = tool_call(
        persona, {"memory_id": memory_id, "memory_content": ""}, triggerer_id=snowflake()
    )
    async with tap_events(channel, topology.events_exchange, ["result.#"]) as tap:
        await publish_tool_call(channel, topology, call)
        await tap.wait_for(ToolCallCompleted, tool_call_id=call.tool_call_id)
    out = io.StringIO()

    assert await print_history(settings, memory_id, as_json=True, out=out) == 0

    [revision] = json.loads(out.getvalue())
    assert revision["memory_id"] == memory_id
    assert revision["action"] == "deleted"
    assert revision["content_before"] == "x" * 300
    assert revision["content_after"] is None
    assert revision["tool_call_id"] == call.tool_call_id
    assert datetime.fromisoformat(revision["occurred_at"]).tzinfo is not None


async def test_restore_of_a_creation_removes_the_memory_and_then_changes_nothing(
    channel: AbstractChannel, topology: Topology, world: World, settings: Settings
) -> None:
    server = await world.server()
    persona = await world.persona(server)
    owner_id, owner_disc = await world.user()
    await world.member(server, owner_disc, "frank", display_name="Frank")
    call = tool_call(
        persona,
        {
            "memory_content": "{user} bakes bread",
            "memory_scope": "target_user",
            "target_user": "Frank",
        },
        triggerer_id=snowflake(),
        tool_name=CREATE_LONG_TERM_MEMORY,
    )
    async with tap_events(channel, topology.events_exchange) as tap:
        await publish_tool_call(channel, topology, call)
        [result] = await tap.wait_for(ToolCallCompleted, tool_call_id=call.tool_call_id)
        assert result.status is MemoryStatus.SAVED
        memory_id = result.data.memory_id
        assert memory_id is not None
        [creation] = await world.revisions(memory_id)
        assert (creation["action"], creation["content_before"]) == ("created", "")

        out = io.StringIO()
        assert await restore_and_print(settings, creation["revision_id"], actor="ops", out=out) == 0
        [audit] = await tap.wait_for(MemoryRestored, memory_id=memory_id)
        [invalidation] = await tap.wait_for(CacheInvalidate, tool_call_id=audit.tool_call_id)

    assert await world.memory(memory_id) is None
    _, removal = await world.revisions(memory_id)
    assert (removal["action"], removal["content_before"], removal["content_after"]) == (
        "restored",
        "{user} bakes bread",
        None,
    )
    assert removal["owner_user_id"] == owner_id and removal["actor_disc_id"] == "ops"
    assert audit.revision_id == removal["revision_id"]
    assert audit.scope == "target_user" and audit.owner_id == owner_disc
    assert (invalidation.cache, invalidation.key) == ("user", owner_disc)
    assert "(deleted)" in out.getvalue()

    again = io.StringIO()
    assert await restore_and_print(settings, creation["revision_id"], out=again) == 0
    assert "already as before revision" in again.getvalue()
    assert "(does not exist)" in again.getvalue()
    assert len(await world.revisions(memory_id)) == 2


async def test_a_restore_that_would_change_nothing_changes_nothing(
    world: World, settings: Settings, channel: AbstractChannel, topology: Topology
) -> None:
    server = await world.server()
    persona = await world.persona(server)
    memory_id = await world.server_memory(persona, "likes tea")
    call = tool_call(
        persona,
        {"memory_id": memory_id, "memory_content": "likes coffee"},
        triggerer_id=snowflake(),
    )
    async with tap_events(channel, topology.events_exchange, ["result.#"]) as tap:
        await publish_tool_call(channel, topology, call)
        await tap.wait_for(ToolCallCompleted, tool_call_id=call.tool_call_id)
    [update] = await world.revisions(memory_id)
    assert await restore_and_print(settings, update["revision_id"], out=io.StringIO()) == 0

    async with tap_events(channel, topology.events_exchange) as tap:
        out = io.StringIO()
        assert await restore_and_print(settings, update["revision_id"], out=out) == 0
        # A restore's events are confirmed by the broker before it returns: any would reach
        # the tap before the answer to a call published after it.
        marker = tool_call(persona, {"memory_id": "x"}, triggerer_id=snowflake())
        await publish_tool_call(channel, topology, marker)
        await tap.wait_for(ToolCallCompleted, tool_call_id=marker.tool_call_id)

    assert "already as before revision" in out.getvalue() and "likes tea" in out.getvalue()
    assert len(await world.revisions(memory_id)) == 2
    assert tap.events(MemoryRestored, memory_id=memory_id) == []
