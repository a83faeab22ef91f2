"""The console's dead-letter page by filter: the letters that match, counted by reason and
tool; "Replay matching" with a reason and a rate, recorded as `console:<name>`; the others
stay in place."""

from __future__ import annotations

import html
from collections.abc import AsyncIterator

import pytest

from contracts import CREATE_LONG_TERM_MEMORY, DeadLettersReplayed, ToolCallRequested
from contracts.dead_letters import ERROR_HEADER
from harness.broker import EventTap, publish_raw, queue_depth, tap_events
from harness.waiting import eventually
from tests.integration.console.conftest import Scene
from tests.integration.operators.seeding import tool_call, worker_dead_letter


@pytest.fixture
async def audit(scene: Scene) -> AsyncIterator[EventTap]:
    async with tap_events(scene.channel, scene.topology.events_exchange) as tap:
        yield tap


async def _seed(scene: Scene) -> list[ToolCallRequested]:
    calls = [tool_call("tc-timeout-1"), tool_call("tc-timeout-2"), tool_call("tc-invalid")]
    await worker_dead_letter(scene.channel, scene.topology, calls[0], "TimeoutError: no answer")
    await worker_dead_letter(
        scene.channel,
        scene.topology,
        calls[1],
        "TimeoutError: no answer",
        routing_key=CREATE_LONG_TERM_MEMORY,
    )
    await worker_dead_letter(scene.channel, scene.topology, calls[2], "invalid envelope: x")
    await _depth_is(scene, scene.topology.dead_letter_queue, 3)
    return calls


async def _depth_is(scene: Scene, queue: str, depth: int) -> None:
    async def settled() -> bool:
        return await queue_depth(scene.channel, queue) == depth

    await eventually(settled, what=f"{queue} to hold {depth}")


async def test_the_page_lists_the_matching_letters_and_counts_them(scene: Scene) -> None:
    await _seed(scene)
    assert await scene.log_in() == 303

    page = await (await scene.client.get("/dead-letters?error=timeout")).text()
    grouped = await (await scene.client.get("/dead-letters?group=1")).text()

    assert "2 of 3 dead-lettered message(s) match" in page
    assert "tc-timeout-1" in page and "tc-timeout-2" in page and "tc-invalid" not in page
    assert "Replay 2 matching" in page
    assert grouped.count('<tr class="group">') == 3
    assert "invalid envelope" in grouped


async def test_a_bad_since_says_what_a_time_is(scene: Scene) -> None:
    assert await scene.log_in() == 303

    page = await scene.client.get("/dead-letters?since=yesterday")

    assert page.status == 400
    assert "RFC 3339" in html.unescape(await page.text())


async def test_replay_matching_sends_back_only_those_and_records_the_reason(
    scene: Scene, audit: EventTap
) -> None:
    await _seed(scene)
    assert await scene.log_in("cat") == 303
    token = await scene.csrf_token()

    page = await scene.client.post(
        "/dead-letters/replay-matching",
        data={
            "csrf_token": token,
            "error": "Timeout",
            "tool": "update_long_term_memory",
            "reason": "the database is back",
            "rate": "20",
        },
    )

    assert page.url.path == "/dead-letters" and page.url.query["error"] == "Timeout"
    assert "Replayed 1 dead letter(s): tc-timeout-1." in await page.text()
    await _depth_is(scene, scene.topology.worker_queue, 1)
    await _depth_is(scene, scene.topology.dead_letter_queue, 2)
    [record] = await audit.wait_for(DeadLettersReplayed)
    assert (record.actor, record.reason, record.count) == ("console:cat", "the database is back", 1)
    assert record.filter == {"error": "Timeout", "tool": "update_long_term_memory"}


async def test_replay_matching_without_a_reason_replays_nothing(
    scene: Scene, audit: EventTap
) -> None:
    await _seed(scene)
    assert await scene.log_in() == 303
    token = await scene.csrf_token()

    page = await scene.client.post(
        "/dead-letters/replay-matching", data={"csrf_token": token, "error": "Timeout"}
    )

    assert "Say why" in await page.text()
    assert await queue_depth(scene.channel, scene.topology.worker_queue) == 0
    await _depth_is(scene, scene.topology.dead_letter_queue, 3)
    assert not audit.events(DeadLettersReplayed)


async def test_a_letter_without_a_tool_call_id_is_named_by_its_event_id(scene: Scene) -> None:
    # A body that says nothing of its call, as a foreign publisher's could.
    await publish_raw(
        scene.channel,
        scene.topology.dead_letter_exchange,
        b'{"hello": "world"}',
        "update_long_term_memory",
        message_id="ev-no-call",
        headers={ERROR_HEADER: "test: no ids"},
    )
    await _depth_is(scene, scene.topology.dead_letter_queue, 1)
    assert await scene.log_in() == 303
    token = await scene.csrf_token()

    page = await scene.client.post(
        "/dead-letters/replay-matching", data={"csrf_token": token, "reason": "r", "rate": "0"}
    )

    text = await page.text()
    assert "Replayed 1 dead letter(s): event ev-no-call (no tool call id)." in text
    assert ": ?." not in text


async def test_the_purge_field_is_empty_and_says_what_to_type(scene: Scene) -> None:
    await _seed(scene)
    assert await scene.log_in() == 303

    page = await (await scene.client.get("/dead-letters")).text()

    assert 'placeholder="' + scene.topology.dead_letter_queue not in page
    assert "To confirm, type the queue's name" in html.unescape(page)


async def test_the_favicon_is_served_without_a_session(scene: Scene) -> None:
    icon = await scene.client.get("/favicon.ico")

    assert icon.status == 200
    assert icon.headers["Content-Type"] == "image/svg+xml"
    assert (await icon.read()).startswith(b"<svg")
