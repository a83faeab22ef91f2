"""`ltm dlq list|replay|purge` by filter against the real broker: only the matching letters
leave the queue, the others stay in place; counts by reason and tool; the audit records."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator

import pytest
from aio_pika.abc import AbstractChannel

from contracts import (
    CREATE_LONG_TERM_MEMORY,
    DeadLettersPurged,
    DeadLettersReplayed,
    ToolCallRequested,
    Topology,
)
from harness.broker import EventTap, queue_depth, tap_events
from harness.waiting import eventually
from infra.settings import Settings
from ltm.commands.dlq import list_dead_letters, purge_dead_letters, replay_dead_letters
from operators.dead_letters import DeadLetterFilter, inspect_dead_letters
from tests.integration.operators.seeding import tool_call, worker_dead_letter

TIMEOUTS = DeadLetterFilter(error="timeouterror")


@pytest.fixture
async def audit(channel: AbstractChannel, topology: Topology) -> AsyncIterator[EventTap]:
    async with tap_events(channel, topology.events_exchange) as tap:
        yield tap


async def _seed(channel: AbstractChannel, topology: Topology) -> list[ToolCallRequested]:
    """Three letters: two timeouts of two tools, one invalid envelope."""
    calls = [tool_call("tc-timeout-1"), tool_call("tc-timeout-2"), tool_call("tc-invalid")]
    await worker_dead_letter(channel, topology, calls[0], "TimeoutError: no answer in 5 s")
    await worker_dead_letter(
        channel,
        topology,
        calls[1],
        "TimeoutError: no answer in 5 s",
        routing_key=CREATE_LONG_TERM_MEMORY,
    )
    await worker_dead_letter(channel, topology, calls[2], "invalid envelope: context: missing")
    await _depth_is(channel, topology.dead_letter_queue, 3)
    return calls


async def _depth_is(channel: AbstractChannel, queue: str, expected: int) -> None:
    async def settled() -> bool:
        return await queue_depth(channel, queue) == expected

    await eventually(settled, what=f"{queue} to hold {expected} message(s)")


async def test_list_by_filter_and_grouped(
    ops_settings: Settings, channel: AbstractChannel, topology: Topology
) -> None:
    await _seed(channel, topology)
    listed, grouped, err = io.StringIO(), io.StringIO(), io.StringIO()

    assert (
        await list_dead_letters(
            ops_settings, dead_letter_filter=TIMEOUTS, as_json=True, out=listed, err=err
        )
        == 0
    )
    assert await list_dead_letters(ops_settings, group=True, as_json=True, out=grouped) == 0

    assert sorted(entry["tool_call_id"] for entry in json.loads(listed.getvalue())) == [
        "tc-timeout-1",
        "tc-timeout-2",
    ]
    assert err.getvalue() == "2 of 3 (matching) dead-lettered message(s) listed\n"
    groups = json.loads(grouped.getvalue())
    assert [(g["reason"], g["tool"], g["count"]) for g in groups] == [
        ("TimeoutError", "create_long_term_memory", 1),
        ("TimeoutError", "update_long_term_memory", 1),
        ("invalid envelope", "update_long_term_memory", 1),
    ]
    assert all(g["first_failed_at"] <= g["last_failed_at"] for g in groups)
    await _depth_is(channel, topology.dead_letter_queue, 3)


async def test_group_as_text_is_a_table(
    ops_settings: Settings, channel: AbstractChannel, topology: Topology
) -> None:
    await _seed(channel, topology)
    out = io.StringIO()

    assert await list_dead_letters(ops_settings, group=True, out=out) == 0

    header, *rows, summary = out.getvalue().splitlines()
    assert header.split()[:3] == ["COUNT", "REASON", "TOOL"]
    assert rows[0].split()[:3] == ["1", "TimeoutError", "create_long_term_memory"]
    assert summary == "3 dead-lettered message(s)"


async def test_a_filtered_replay_sends_back_only_the_matching_and_records_why(
    ops_settings: Settings, channel: AbstractChannel, topology: Topology, audit: EventTap
) -> None:
    await _seed(channel, topology)
    chosen = DeadLetterFilter(error="Timeout", tool="update_long_term_memory", guild="1001")
    out = io.StringIO()

    code = await replay_dead_letters(
        ops_settings,
        None,
        dead_letter_filter=chosen,
        reason="the database is back",
        actor="operator:ann",
        out=out,
    )

    assert code == 0
    assert out.getvalue().splitlines()[-1] == "replayed 1 of 1 matching dead-lettered message(s)"
    await _depth_is(channel, topology.worker_queue, 1)
    left, _ = await inspect_dead_letters(ops_settings)
    assert sorted(entry.tool_call_id or "" for entry in left) == ["tc-invalid", "tc-timeout-2"]
    [record] = await audit.wait_for(DeadLettersReplayed)
    assert (record.actor, record.reason, record.count) == (
        "operator:ann",
        "the database is back",
        1,
    )
    assert record.filter == {"error": "Timeout", "tool": "update_long_term_memory", "guild": "1001"}
    assert [call.tool_call_id for call in record.replayed] == ["tc-timeout-1"]


async def test_a_filter_that_matches_nothing_is_done_with_nothing_to_do(
    ops_settings: Settings, channel: AbstractChannel, topology: Topology, audit: EventTap
) -> None:
    await _seed(channel, topology)
    out = io.StringIO()

    code = await replay_dead_letters(
        ops_settings, None, dead_letter_filter=DeadLetterFilter(guild="9"), reason="r", out=out
    )

    assert code == 0
    assert out.getvalue() == f"{topology.dead_letter_queue} holds no dead letter that matches\n"
    await _depth_is(channel, topology.dead_letter_queue, 3)
    assert not audit.events(DeadLettersReplayed)


async def test_a_dry_run_names_the_letters_and_moves_none(
    ops_settings: Settings, channel: AbstractChannel, topology: Topology
) -> None:
    calls = await _seed(channel, topology)
    out = io.StringIO()

    code = await replay_dead_letters(
        ops_settings,
        None,
        dead_letter_filter=TIMEOUTS,
        reason="r",
        dry_run=True,
        as_json=True,
        out=out,
    )

    assert code == 0
    document = json.loads(out.getvalue())
    assert document["count"] == 2
    assert sorted(document["letters"], key=lambda letter: letter["tool_call_id"]) == [
        {"event_id": str(call.event_id), "tool_call_id": call.tool_call_id} for call in calls[:2]
    ]
    await _depth_is(channel, topology.dead_letter_queue, 3)
    assert await queue_depth(channel, topology.worker_queue) == 0


async def test_a_dry_run_of_an_unknown_id_is_exit_3(
    ops_settings: Settings, channel: AbstractChannel, topology: Topology
) -> None:
    await _seed(channel, topology)
    err = io.StringIO()

    code = await replay_dead_letters(
        ops_settings, "no-such-event", dry_run=True, out=io.StringIO(), err=err
    )

    assert code == 3
    assert "no dead-lettered message with event id no-such-event" in err.getvalue()


async def test_a_filtered_purge_asks_then_removes_only_the_matching(
    ops_settings: Settings, channel: AbstractChannel, topology: Topology, audit: EventTap
) -> None:
    await _seed(channel, topology)
    out = io.StringIO()

    code = await purge_dead_letters(
        ops_settings,
        dead_letter_filter=DeadLetterFilter(error="invalid envelope"),
        actor="operator:ann",
        out=out,
        stdin=io.StringIO("y\n"),
    )

    assert code == 0
    assert (
        f"remove 1 matching dead-lettered message(s) from {topology.dead_letter_queue}?"
        in out.getvalue()
    )
    assert "removed 1 matching dead-lettered message(s)" in out.getvalue()
    left, _ = await inspect_dead_letters(ops_settings)
    assert sorted(entry.tool_call_id or "" for entry in left) == ["tc-timeout-1", "tc-timeout-2"]
    [record] = await audit.wait_for(DeadLettersPurged)
    assert (record.actor, record.removed, record.filter) == (
        "operator:ann",
        1,
        {"error": "invalid envelope"},
    )


async def test_a_filtered_purge_answered_no_removes_nothing(
    ops_settings: Settings, channel: AbstractChannel, topology: Topology
) -> None:
    await _seed(channel, topology)

    code = await purge_dead_letters(
        ops_settings, dead_letter_filter=TIMEOUTS, out=io.StringIO(), stdin=io.StringIO("n\n")
    )

    assert code == 1
    await _depth_is(channel, topology.dead_letter_queue, 3)


async def test_ten_thousand_letters_replay_quickly_without_a_rate(
    ops_settings: Settings, channel: AbstractChannel, topology: Topology
) -> None:
    # Confirms come back windowed: a round trip per letter would take minutes here, beyond the
    # suite's per-test timeout (pyproject's `timeout`); its speed is not asserted here.
    many = 10_000
    await _publish_letters(channel, topology, many)
    await _depth_is(channel, topology.dead_letter_queue, many)
    out = io.StringIO()

    code = await replay_dead_letters(
        ops_settings, None, dead_letter_filter=TIMEOUTS, reason="load", rate=0, out=out
    )

    assert code == 0, out.getvalue()[-500:]
    assert out.getvalue().splitlines()[-1] == (
        f"replayed {many} of {many} matching dead-lettered message(s)"
    )
    await _depth_is(channel, topology.worker_queue, many)
    await _depth_is(channel, topology.dead_letter_queue, 0)


async def _publish_letters(channel: AbstractChannel, topology: Topology, count: int) -> None:
    import asyncio

    window = asyncio.Semaphore(200)

    async def one(index: int) -> None:
        async with window:
            await worker_dead_letter(
                channel, topology, tool_call(f"tc-{index}"), "TimeoutError: no answer"
            )

    await asyncio.gather(*(one(index) for index in range(count)))
