"""What the console does, through its pages, on the real broker and database: purge only
after the queue's name is typed, replays and purges recorded with the operator's name,
restores as `console:<name>`, memories found, the overview's numbers."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from contracts import DeadLettersPurged, DeadLettersReplayed, MemoryRestored
from harness.broker import EventTap, queue_depth, tap_events
from harness.waiting import eventually
from harness.world import World
from tests.integration.console.conftest import Scene
from tests.integration.operators.seeding import tool_call, worker_dead_letter


@pytest.fixture
async def audit(scene: Scene) -> AsyncIterator[EventTap]:
    async with tap_events(scene.channel, scene.topology.events_exchange) as tap:
        yield tap


async def _two_dead_letters(scene: Scene) -> list[str]:
    ids = [f"dl-{uuid.uuid4()}" for _ in range(2)]
    for tool_call_id in ids:
        await worker_dead_letter(
            scene.channel, scene.topology, tool_call(tool_call_id), "test: poisoned"
        )
    return ids


async def _depth_is(scene: Scene, queue: str, depth: int) -> bool:
    return await queue_depth(scene.channel, queue) == depth


async def test_purge_needs_the_queue_name_typed_and_is_recorded(
    scene: Scene, audit: EventTap
) -> None:
    await _two_dead_letters(scene)
    assert await scene.log_in() == 303
    token = await scene.csrf_token()
    queue = scene.topology.dead_letter_queue

    wrong = await scene.client.post(
        "/dead-letters/purge", data={"csrf_token": token, "queue_name": queue + "x"}
    )
    assert wrong.status == 400
    assert "Nothing was removed" in await wrong.text()
    # The page listed them by holding them unacknowledged: the broker hands them back to the
    # queue once that channel is closed, shortly after the page is served.
    await eventually(lambda: _depth_is(scene, queue, 2), timeout=10, what="both still queued")

    done = await scene.client.post(
        "/dead-letters/purge", data={"csrf_token": token, "queue_name": f" {queue} "}
    )

    assert done.status == 200  # the dead letters page, after the redirect
    assert "Purged" in await done.text()
    assert await queue_depth(scene.channel, queue) == 0
    [record] = await audit.wait_for(DeadLettersPurged)
    assert (record.actor, record.queue, record.removed) == ("console:ann", queue, 2)


async def test_replaying_everything_sends_each_call_back_and_records_which(
    scene: Scene, audit: EventTap
) -> None:
    ids = await _two_dead_letters(scene)
    assert await scene.log_in("bob") == 303
    token = await scene.csrf_token()

    page = await scene.client.post("/dead-letters/replay-all", data={"csrf_token": token})

    assert "Replayed 2 dead letter(s)" in await page.text()
    assert await queue_depth(scene.channel, scene.topology.dead_letter_queue) == 0
    assert await queue_depth(scene.channel, scene.topology.worker_queue) == 2
    [record] = await audit.wait_for(DeadLettersReplayed)
    assert record.actor == "console:bob"
    assert sorted(call.tool_call_id or "" for call in record.replayed) == sorted(ids)


async def test_replaying_an_event_id_that_is_gone_says_so_and_records_nothing(
    scene: Scene, audit: EventTap
) -> None:
    assert await scene.log_in() == 303
    token = await scene.csrf_token()

    page = await scene.client.post(
        "/dead-letters/replay", data={"csrf_token": token, "event_id": str(uuid.uuid4())}
    )

    assert "Nothing was done" in await page.text()
    assert await queue_depth(scene.channel, scene.topology.worker_queue) == 0
    assert not audit.events(DeadLettersReplayed)


async def _an_updated_memory(world: World) -> tuple[int, int]:
    """A server memory updated once from "before" to "after": its id and the revision's."""
    server = await world.server()
    persona = await world.persona(server)
    memory_id = await world.server_memory(persona, "after")
    [row] = await world.execute(
        "INSERT INTO memory_revisions (scope, memory_id, action, content_before, content_after,"
        " server_id, persona_lineage_id, actor_disc_id, tool_call_id)"
        " VALUES ('server_wide', %s, 'updated', 'before', 'after', %s, %s, '42', %s)"
        " RETURNING revision_id",
        memory_id,
        server.server_id,
        persona.lineage,
        f"call-{uuid.uuid4()}",
    )
    return memory_id, int(row["revision_id"])


async def test_a_restore_from_the_console_is_the_operators_revision_and_event(
    scene: Scene, world: World, audit: EventTap
) -> None:
    memory_id, revision_id = await _an_updated_memory(world)
    assert await scene.log_in() == 303
    token = await scene.csrf_token(f"/memories/{memory_id}/restore/{revision_id}")

    page = await scene.client.post(
        f"/memories/{memory_id}/restore/{revision_id}", data={"csrf_token": token}
    )
    again = await scene.client.post(
        f"/memories/{memory_id}/restore/{revision_id}", data={"csrf_token": token}
    )

    assert f"Memory {memory_id} restored as before revision {revision_id}" in await page.text()
    assert "nothing changed" in await again.text()
    assert await world.content(memory_id) == "before"
    revisions = await world.revisions(memory_id)
    assert [(r["action"], r["actor_disc_id"]) for r in revisions] == [
        ("updated", "42"),
        ("restored", "console:ann"),
    ]
    [event] = await audit.wait_for(MemoryRestored, memory_id=memory_id)
    assert event.actor_id == "console:ann"


async def test_a_restore_of_a_revision_of_another_memory_is_refused(
    scene: Scene, world: World
) -> None:
    memory_id, revision_id = await _an_updated_memory(world)
    other_id, _ = await _an_updated_memory(world)
    assert await scene.log_in() == 303
    token = await scene.csrf_token()

    page = await scene.client.post(
        f"/memories/{other_id}/restore/{revision_id}", data={"csrf_token": token}
    )

    assert page.status == 404
    assert await world.content(memory_id) == "after"


async def test_memories_are_found_by_text_server_and_user_and_shown_as_the_llm_sees_them(
    scene: Scene, world: World
) -> None:
    server = await world.server()
    persona = await world.persona(server)
    word = f"tea{uuid.uuid4().hex[:8]}"
    memory_id = await world.server_memory(persona, f"likes {word} at 5")
    assert await scene.log_in() == 303

    by_text = await (await scene.client.get("/memories", params={"text": word.upper()})).text()
    by_server = await (
        await scene.client.get("/memories", params={"server": server.disc_id})
    ).text()
    by_id = await scene.client.get(f"/memories?memory={memory_id}", allow_redirects=False)

    assert f"ID:{memory_id}</a>" in by_text
    assert f"ID:{memory_id} likes {word} at 5" in by_server
    assert by_id.headers["Location"] == f"/memories/{memory_id}"
    nothing = await (await scene.client.get("/memories", params={"text": "%"})).text()
    assert f"ID:{memory_id}</a>" not in nothing


async def test_the_overview_counts_the_calls_answered_and_their_latency(
    scene: Scene, world: World
) -> None:
    assert await scene.log_in() == 303

    async def answered() -> int:
        snapshot = await (await scene.client.get("/overview.json")).json()
        return int(snapshot["tiles"]["answered_last_hour"])

    before = await answered()
    now = datetime.now(UTC)
    for waited_ms in (20, 40, 60):
        await world.execute(
            "INSERT INTO tool_call_inbox (tool_call_id, event_id, tool_name, channel_id,"
            " shard_id, status, result, completed_at, requested_at)"
            " VALUES (%s, %s, 'update_long_term_memory', '1', 0,"
            " 'memory_update_failed_not_found', '{}', %s, %s)",
            f"ov-{uuid.uuid4()}",
            uuid.uuid4(),
            now,
            now - timedelta(milliseconds=waited_ms),
        )

    async def counted() -> dict[str, object] | None:
        snapshot: dict[str, object] = await (await scene.client.get("/overview.json")).json()
        tiles = snapshot["tiles"]
        assert isinstance(tiles, dict)
        return snapshot if tiles["answered_last_hour"] >= before + 3 else None

    snapshot = await eventually(counted, timeout=10, what="the overview to count the calls")
    tiles = snapshot["tiles"]
    assert isinstance(tiles, dict)
    assert tiles["failed_last_hour"] >= 3
    assert tiles["p50_ms"] is not None
    assert tiles["dead_letters"] == 0
    series = snapshot["series"]
    assert isinstance(series, dict)
    # This minute's, or the last one's if a minute began since.
    assert sum(series["by_status"]["memory_update_failed_not_found"][-2:]) > 0
