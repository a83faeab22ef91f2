"""The console's Changes page on the real database and broker: the revisions matching the
filters with their diffs, then "Revert these": the plan, the reason, the revert as
`console:<name>`, and nothing written when the plan changed after it was shown."""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator

import pytest

from contracts import MemoriesReverted
from harness.broker import EventTap, tap_events
from harness.snowflake import snowflake
from harness.world import World
from tests.integration.console.conftest import Scene


@pytest.fixture
async def audit(scene: Scene) -> AsyncIterator[EventTap]:
    async with tap_events(scene.channel, scene.topology.events_exchange) as tap:
        yield tap


async def _rewritten(world: World, actor: str, count: int) -> list[int]:
    """`count` server memories rewritten by `actor` from "tea at five" to "coffee at six"."""
    server = await world.server()
    persona = await world.persona(server)
    memories = []
    for _ in range(count):
        memory_id = await world.server_memory(persona, "coffee at six")
        await world.execute(
            "INSERT INTO memory_revisions (scope, memory_id, action, content_before,"
            " content_after, server_id, persona_lineage_id, actor_disc_id, tool_call_id)"
            " VALUES ('server_wide', %s, 'updated', 'tea at five', 'coffee at six', %s, %s,"
            " %s, %s)",
            memory_id,
            server.server_id,
            persona.lineage,
            actor,
            f"call-{uuid.uuid4()}",
        )
        memories.append(memory_id)
    return memories


def _plan_of(page: str) -> str:
    found = re.search(r'name="plan" value="([0-9a-f]+)"', page)
    assert found, page
    return found.group(1)


async def test_changes_are_listed_with_diffs_then_reverted_after_the_plan_and_a_reason(
    scene: Scene, world: World, audit: EventTap
) -> None:
    vandal = snowflake()
    memories = await _rewritten(world, vandal, 2)
    assert await scene.log_in() == 303

    listing = await (await scene.client.get("/changes", params={"actor": vandal})).text()
    assert "2 revision(s)" in listing
    assert "<del>tea</del>" in listing and "<ins>coffee</ins>" in listing
    assert f'href="/changes/revert?actor={vandal}"' in listing

    plan_page = await (await scene.client.get("/changes/revert", params={"actor": vandal})).text()
    assert "2 to revert, 0 skipped" in plan_page
    plan = _plan_of(plan_page)
    token = await scene.csrf_token("/changes")
    form = {"csrf_token": token, "actor": vandal, "plan": plan}

    no_reason = await scene.client.post("/changes/revert", data={**form, "reason": " "})
    assert no_reason.status == 400 and "nothing was reverted" in await no_reason.text()
    assert await world.content(memories[0]) == "coffee at six"

    done = await scene.client.post("/changes/revert", data={**form, "reason": "vandalism"})
    shown = await done.text()
    assert done.status == 200 and "Reverted 2 memory(ies), skipped 0" in shown
    assert str(done.url.path) == "/changes" and "revert:" in done.url.query["tool_call"]
    assert [await world.content(memory_id) for memory_id in memories] == ["tea at five"] * 2
    restored = (await world.revisions(memories[0]))[-1]
    assert (restored["actor_disc_id"], restored["reason"]) == ("console:ann", "vandalism")
    [record] = await audit.wait_for(MemoriesReverted)
    assert (record.operator, record.reverted, record.skipped) == ("console:ann", 2, 0)

    again = await (await scene.client.get("/changes/revert", params={"actor": vandal})).text()
    assert "0 to revert, 0 skipped, 2 already as before" in again
    assert 'name="plan"' not in again


async def test_a_plan_that_changed_after_it_was_shown_reverts_nothing(
    scene: Scene, world: World
) -> None:
    vandal = snowflake()
    [memory_id] = await _rewritten(world, vandal, 1)
    assert await scene.log_in() == 303
    plan = _plan_of(
        await (await scene.client.get("/changes/revert", params={"actor": vandal})).text()
    )
    await world.execute(
        "UPDATE server_memories SET content = 'changed meanwhile' WHERE server_memory_id = %s",
        memory_id,
    )
    token = await scene.csrf_token("/changes")

    page = await scene.client.post(
        "/changes/revert",
        data={"csrf_token": token, "actor": vandal, "plan": plan, "reason": "vandalism"},
    )

    assert page.status == 409 and "nothing was reverted" in await page.text()
    assert await world.content(memory_id) == "changed meanwhile"


async def test_a_revert_without_a_filter_or_the_csrf_token_changes_nothing(
    scene: Scene, world: World
) -> None:
    vandal = snowflake()
    [memory_id] = await _rewritten(world, vandal, 1)
    assert await scene.log_in() == 303
    token = await scene.csrf_token("/changes")

    forged = await scene.client.post(
        "/changes/revert", data={"actor": vandal, "reason": "r", "plan": "x"}
    )
    unfiltered = await scene.client.post(
        "/changes/revert", data={"csrf_token": token, "reason": "r", "plan": "x"}
    )
    bad_time = await scene.client.get("/changes", params={"since": "yesterday"})

    assert (forged.status, unfiltered.status, bad_time.status) == (403, 400, 400)
    assert await world.content(memory_id) == "coffee at six"
