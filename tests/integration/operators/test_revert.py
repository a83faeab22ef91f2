"""`ltm memory changes` and `ltm memory revert` on revisions written into the real database:
the filters, the plan, the one transaction, its events, and the exit codes."""

from __future__ import annotations

import io
import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from contracts import RevisionFilter, decode_event
from harness.services import TestServices
from harness.snowflake import snowflake
from harness.world import Persona, World
from infra.settings import Settings
from ltm.commands.memory import changes_and_print, revert_and_print
from operators.changes import PlanChanged, planned_revert, revert
from operators.revert_plan import CHANGED_BY_SOMEONE_ELSE, MAX_MEMORIES
from tests.support.commands import run_ltm

DAY = datetime(2026, 12, 3, 21, 0, tzinfo=UTC)


@pytest.fixture
def world(services: TestServices) -> World:
    return World(services.database_url)


@dataclass
class Revisions:
    """Writes a memory's change as the worker would: the content, its revision, and the
    idempotency record of the call (with its channel)."""

    world: World
    persona: Persona

    async def change(
        self,
        memory_id: int,
        after: str | None,
        *,
        actor: str,
        channel: str | None = None,
        at: datetime = DAY,
        action: str = "updated",
    ) -> dict[str, Any]:
        tool_call_id = f"call-{uuid.uuid4()}"
        before = await self.world.content(memory_id) or ""
        if after is None:
            await self.world.execute(
                "DELETE FROM server_memories WHERE server_memory_id = %s", memory_id
            )
            action = "deleted"
        else:
            await self.world.execute(
                "INSERT INTO server_memories (server_memory_id, server_id, persona_id,"
                " persona_lineage_id, content) VALUES (%s, %s, %s, %s, %s)"
                " ON CONFLICT (server_memory_id) DO UPDATE SET content = EXCLUDED.content",
                memory_id,
                self.persona.server.server_id,
                self.persona.persona_id,
                self.persona.lineage,
                after,
            )
        if channel is not None:
            await self.world.execute(
                "INSERT INTO tool_call_inbox (tool_call_id, event_id, tool_name, guild_id,"
                " channel_id, shard_id) VALUES (%s, %s, 'update_long_term_memory', %s, %s, 0)",
                tool_call_id,
                uuid.uuid4(),
                self.persona.server.disc_id,
                channel,
            )
        [row] = await self.world.execute(
            "INSERT INTO memory_revisions (scope, memory_id, action, content_before,"
            " content_after, server_id, owner_user_id, persona_lineage_id, actor_disc_id,"
            " tool_call_id, occurred_at) VALUES ('server_wide', %s, %s, %s, %s, %s, NULL, %s,"
            " %s, %s, %s) RETURNING *",
            memory_id,
            action,
            before,
            after,
            self.persona.server.server_id,
            self.persona.lineage,
            actor,
            tool_call_id,
            at,
        )
        return row

    async def create(self, content: str, *, actor: str, channel: str | None = None) -> int:
        [row] = await self.world.execute("SELECT nextval('memory_id_seq') AS id")
        memory_id = int(row["id"])
        await self.change(memory_id, content, actor=actor, channel=channel, action="created")
        return memory_id


@pytest.fixture
async def revisions(world: World) -> Revisions:
    server = await world.server()
    return Revisions(world, await world.persona(server))


async def _outbox(world: World, tool_call_id: str) -> list[dict[str, Any]]:
    return await world.outbox_of_call(tool_call_id)


async def test_changes_match_every_filter_newest_first_with_their_diffs(
    ops_settings: Settings, world: World, revisions: Revisions
) -> None:
    vandal, other, channel = snowflake(), snowflake(), snowflake()
    memory = await revisions.world.server_memory(revisions.persona, "Movie night is on Fridays.")
    first = await revisions.change(
        memory, "Movie night is on Saturdays.", actor=vandal, channel=channel
    )
    second = await revisions.change(
        memory, "Movie night is cancelled.", actor=vandal, at=DAY + timedelta(hours=1)
    )
    await revisions.change(memory, "Movie night is on Sundays.", actor=other, channel=channel)
    guild = revisions.persona.server.disc_id

    out = io.StringIO()
    by_vandal = RevisionFilter(actor_disc_id=vandal, guild_id=guild)
    assert await changes_and_print(ops_settings, by_vandal, as_json=True, out=out) == 0
    listed = json.loads(out.getvalue())
    assert [c["revision_id"] for c in listed] == [second["revision_id"], first["revision_id"]]
    assert listed[1] == {
        "revision_id": first["revision_id"],
        "memory_id": memory,
        "scope": "server_wide",
        "action": "updated",
        "actor_disc_id": vandal,
        "occurred_at": "2026-12-03T21:00:00Z",
        "tool_call_id": first["tool_call_id"],
        "guild_id": guild,
        "channel_id": channel,
        "content_before": "Movie night is on Fridays.",
        "content_after": "Movie night is on Saturdays.",
        "diff": "Movie night is on [-Fridays-]{+Saturdays+}.",
    }

    async def listed_ids(**fields: Any) -> list[int]:
        out = io.StringIO()
        limit = fields.pop("limit", 100)
        found = RevisionFilter(**{"guild_id": guild, **fields})
        await changes_and_print(ops_settings, found, limit=limit, as_json=True, out=out)
        return [change["revision_id"] for change in json.loads(out.getvalue())]

    assert await listed_ids(channel_id=channel, actor_disc_id=vandal) == [first["revision_id"]]
    assert await listed_ids(tool_call_id=second["tool_call_id"]) == [second["revision_id"]]
    assert await listed_ids(since=DAY + timedelta(minutes=30), until=DAY + timedelta(hours=2)) == [
        second["revision_id"]
    ]
    assert len(await listed_ids(limit=2)) == 2
    assert await listed_ids(guild_id=snowflake()) == []

    text = io.StringIO()
    await changes_and_print(
        ops_settings, RevisionFilter(tool_call_id=first["tool_call_id"]), out=text
    )
    assert text.getvalue().splitlines() == [
        f"revision {first['revision_id']}  updated  memory {memory} (server_wide)  "
        f"2026-12-03T21:00:00Z  by {vandal}",
        f"  guild {guild}  channel {channel}  tool call {first['tool_call_id']}",
        "  Movie night is on [-Fridays-]{+Saturdays+}.",
        "",
        "1 revision(s)",
    ]


async def test_a_revert_puts_back_updates_creations_and_deletions_in_one_transaction(
    ops_settings: Settings, world: World, revisions: Revisions
) -> None:
    vandal, other = snowflake(), snowflake()
    updated = await world.server_memory(revisions.persona, "tea at five")
    deleted = await world.server_memory(revisions.persona, "plays the cello")
    theirs = await world.server_memory(revisions.persona, "likes cats")
    await revisions.change(updated, "coffee at five", actor=vandal)
    await revisions.change(updated, "coffee at six", actor=vandal)
    await revisions.change(deleted, None, actor=vandal)
    created = await revisions.create("spam", actor=vandal)
    await revisions.change(theirs, "likes dogs", actor=vandal)
    await revisions.change(theirs, "likes dogs and cats", actor=other)
    by_vandal = RevisionFilter(actor_disc_id=vandal)

    plan = await planned_revert(ops_settings, by_vandal)
    assert [(s.memory_id, s.before, s.after) for s in plan.reverts] == [
        (updated, "coffee at six", "tea at five"),
        (deleted, None, "plays the cello"),
        (created, "spam", None),
    ]
    assert [(s.memory_id, s.why) for s in plan.skipped] == [(theirs, CHANGED_BY_SOMEONE_ELSE)]
    assert await world.content(updated) == "coffee at six"  # the dry run wrote nothing

    done = await revert(ops_settings, by_vandal, reason="vandalism", actor="operator:ann")

    assert done.plan == plan and done.tool_call_id is not None
    assert await world.content(updated) == "tea at five"
    assert await world.content(deleted) == "plays the cello"
    assert await world.content(created) is None
    assert await world.content(theirs) == "likes dogs and cats"
    written = await world.revisions_of_call(done.tool_call_id)
    assert [(r["memory_id"], r["action"], r["actor_disc_id"], r["reason"]) for r in written] == [
        (updated, "restored", "operator:ann", "vandalism"),
        (deleted, "restored", "operator:ann", "vandalism"),
        (created, "restored", "operator:ann", "vandalism"),
    ]
    outbox = await _outbox(world, done.tool_call_id)
    # Published with confirms once committed.
    assert all(row["published_at"] is not None for row in outbox)
    kinds = [row["routing_key"] for row in outbox]
    server = revisions.persona.server.disc_id
    assert kinds == [
        "memory.restored.server_wide",
        f"cache.persona_state.{server}",
        "memory.restored.server_wide",
        "memory.restored.server_wide",
        "operator.memories.reverted",
    ]
    record = decode_event(bytes(outbox[-1]["body"]))
    assert record.model_dump(include={"operator", "reason", "reverted", "skipped"}) == {
        "operator": "operator:ann",
        "reason": "vandalism",
        "reverted": 3,
        "skipped": 1,
    }
    assert record.model_dump()["filter"]["actor_disc_id"] == vandal

    again = await revert(ops_settings, by_vandal, reason="vandalism", actor="operator:ann")
    assert again.restored == () and again.tool_call_id is None
    assert [(s.memory_id, s.why) for s in again.plan.skipped] == [(theirs, CHANGED_BY_SOMEONE_ELSE)]

    forced = await revert(
        ops_settings, by_vandal, reason="all of it", actor="operator:ann", force=True
    )
    assert [step.memory_id for step in forced.plan.reverts] == [theirs]
    assert await world.content(theirs) == "likes cats"


async def test_a_plan_changed_since_it_was_approved_writes_nothing(
    ops_settings: Settings, world: World, revisions: Revisions
) -> None:
    vandal = snowflake()
    memory = await world.server_memory(revisions.persona, "a")
    await revisions.change(memory, "b", actor=vandal)
    by_vandal = RevisionFilter(actor_disc_id=vandal)
    shown = await planned_revert(ops_settings, by_vandal)
    await revisions.change(memory, "c", actor=snowflake())

    with pytest.raises(PlanChanged):
        await revert(
            ops_settings, by_vandal, reason="r", actor="operator:ann", approved=shown.fingerprint
        )
    assert await world.content(memory) == "c"
    assert len(await world.revisions(memory)) == 2


async def test_revert_exit_codes_and_the_json_of_a_dry_run(
    ops_settings: Settings, services: TestServices, world: World, revisions: Revisions
) -> None:
    vandal = snowflake()
    memory = await world.server_memory(revisions.persona, "a")
    await revisions.change(memory, "b", actor=vandal)
    by_vandal = RevisionFilter(actor_disc_id=vandal)

    out = io.StringIO()
    assert (
        await revert_and_print(
            ops_settings,
            by_vandal,
            reason="r",
            actor="operator:ann",
            dry_run=True,
            as_json=True,
            out=out,
        )
        == 0
    )
    assert json.loads(out.getvalue()) == {
        "dry_run": True,
        "reverted": [
            {
                "memory_id": memory,
                "scope": "server_wide",
                "before": "b",
                "after": "a",
                "revision_id": None,
            }
        ],
        "skipped": [],
    }
    refused = io.StringIO()
    assert (
        await revert_and_print(
            ops_settings,
            by_vandal,
            reason="r",
            actor="operator:ann",
            ask=True,
            out=refused,
            stdin=io.StringIO("n\n"),
        )
        == 1
    )
    assert refused.getvalue().splitlines()[-2:] == [
        "would revert 1 memory(ies), skipped 0",
        "revert 1 memory(ies)? [y/N] nothing reverted",
    ]
    assert await world.content(memory) == "b"
    said_yes = io.StringIO()
    assert (
        await revert_and_print(
            ops_settings,
            by_vandal,
            reason="r",
            actor="operator:ann",
            ask=True,
            out=said_yes,
            stdin=io.StringIO("y\n"),
        )
        == 0
    )
    assert await world.content(memory) == "a"
    assert said_yes.getvalue().splitlines()[-1] == "reverted 1 memory(ies), skipped 0"

    err = io.StringIO()
    nobody = RevisionFilter(actor_disc_id=snowflake())
    assert (
        await revert_and_print(ops_settings, nobody, reason="r", actor="operator:a", err=err) == 3
    )
    assert "no revision matches" in err.getvalue()

    no_filter = await run_ltm(services, "memory", "revert", "--reason", "r", "--yes")
    assert no_filter.code == 2 and "at least one filter" in no_filter.stderr
    no_reason = await run_ltm(services, "memory", "revert", "--actor", vandal, "--yes")
    assert no_reason.code == 2 and "--reason" in no_reason.stderr
    no_terminal = await run_ltm(services, "memory", "revert", "--actor", vandal, "--reason", "r")
    assert no_terminal.code == 2 and "--yes" in no_terminal.stderr


async def test_more_memories_than_a_revert_takes_is_a_usage_error(
    ops_settings: Settings, world: World, revisions: Revisions
) -> None:
    vandal = snowflake()
    persona = revisions.persona
    await world.execute(
        "INSERT INTO memory_revisions (scope, memory_id, action, content_before,"
        " content_after, server_id, persona_lineage_id, actor_disc_id, tool_call_id)"
        " SELECT 'server_wide', nextval('memory_id_seq'), 'created', '', 'x', %s, %s, %s,"
        " 'call-' || n FROM generate_series(1, %s) AS n",
        persona.server.server_id,
        persona.lineage,
        vandal,
        MAX_MEMORIES + 1,
    )
    err = io.StringIO()
    code = await revert_and_print(
        ops_settings, RevisionFilter(actor_disc_id=vandal), reason="r", actor="operator:a", err=err
    )
    assert code == 2
    assert "more than 1000 memories" in err.getvalue()
