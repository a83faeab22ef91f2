"""A dead-letter queue of two kinds of failure, with a real worker: counted by reason and
tool, then only the first kind replayed, paced, each call answered once, the rest in place."""

from __future__ import annotations

import asyncio
import io
import json
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aio_pika.abc import AbstractChannel

from contracts import DeadLettersReplayed, ToolCallCompleted, ToolCallRequested, Topology
from harness.broker import own_topology, queue_depth, tap_events
from harness.services import TestServices
from harness.snowflake import snowflake
from harness.waiting import eventually
from harness.world import World, tool_call
from infra.settings import Settings
from ltm.commands.dlq import list_dead_letters, replay_dead_letters
from operators.dead_letters import DeadLetterFilter, inspect_dead_letters
from tests.e2e.conftest import new_worker
from tests.integration.operators.seeding import worker_dead_letter

TIMED_OUT = "TimeoutError: the database did not answer within 5 s"
INVALID = "invalid envelope: context.channel_id: missing"


async def _updates(world: World, count: int) -> list[ToolCallRequested]:
    server = await world.server()
    persona = await world.persona(server)
    calls = []
    for index in range(count):
        memory_id = await world.server_memory(persona, f"memory {index}")
        arguments = {"memory_id": memory_id, "memory_content": f"memory {index}, replayed"}
        calls.append(tool_call(persona, arguments, triggerer_id=snowflake()))
    return calls


async def _dead_letter(
    channel: AbstractChannel, topology: Topology, calls: list[ToolCallRequested], reason: str
) -> None:
    window = asyncio.Semaphore(100)

    async def one(call: ToolCallRequested) -> None:
        async with window:
            await worker_dead_letter(channel, topology, call, reason)

    await asyncio.gather(*(one(call) for call in calls))


@pytest.fixture
async def own(settings: Settings) -> AsyncIterator[tuple[Settings, Topology, AbstractChannel]]:
    """A topology of the test's own: its dead-letter queue holds only this test's letters."""
    async with own_topology(settings, "dlqfilter", publisher_confirms=True) as deployment:
        yield deployment


async def test_a_filtered_replay_answers_only_its_calls_at_its_rate(
    own: tuple[Settings, Topology, AbstractChannel],
    world: World,
    services: TestServices,
    tmp_path: Path,
) -> None:
    settings, topology, channel = own
    timed_out, invalid = await _updates(world, 300), await _updates(world, 200)
    await _dead_letter(channel, topology, timed_out, TIMED_OUT)
    await _dead_letter(channel, topology, invalid, INVALID)

    async def all_there() -> bool:
        return await queue_depth(channel, topology.dead_letter_queue) == 500

    await eventually(all_there, what="500 dead letters")
    grouped = io.StringIO()
    assert await list_dead_letters(settings, group=True, as_json=True, out=grouped) == 0
    assert [(g["reason"], g["count"]) for g in json.loads(grouped.getvalue())] == [
        ("TimeoutError", 300),
        ("invalid envelope", 200),
    ]

    with new_worker(
        services, tmp_path, "replaying", LTM_AMQP_PREFIX=settings.amqp_prefix
    ) as worker:
        await worker.wait_ready_async()
        async with tap_events(channel, topology.events_exchange) as events:
            out, err = io.StringIO(), io.StringIO()
            started = time.monotonic()
            code = await replay_dead_letters(
                settings,
                None,
                dead_letter_filter=DeadLetterFilter(error="TimeoutError"),
                reason="the database is back",
                rate=100,
                actor="operator:ann",
                out=out,
                err=err,
            )
            took = time.monotonic() - started
            assert code == 0, err.getvalue()
            assert out.getvalue().splitlines()[-1] == (
                "replayed 300 of 300 matching dead-lettered message(s)"
            )
            # 300 at 100 a second: 299 intervals of 10 ms from the pacing alone.
            assert took >= 2.5, f"took {took:.2f} s"

            replayed_ids = {call.tool_call_id for call in timed_out}

            def answered(tap: object) -> bool:
                return {
                    answer.tool_call_id for answer in events.events(ToolCallCompleted)
                } >= replayed_ids

            await events.wait_until(answered, timeout=120, what="the 300 answers")
            # At least once, as every event: a copy the outbox sweep sent again has the same id.
            [record] = {
                replayed.event_id: replayed
                for replayed in await events.wait_for(DeadLettersReplayed)
            }.values()

            # Drained: every replayed call acked, so no second answer is still on its way.
            async def drained() -> bool:
                return await queue_depth(channel, topology.worker_queue) == 0

            await eventually(drained, what="the worker queue drained")

    answers = Counter(answer.tool_call_id for answer in events.events(ToolCallCompleted))
    assert {answers[call_id] for call_id in replayed_ids} == {1}
    assert not {call.tool_call_id for call in invalid} & set(answers)
    assert (record.reason, record.count, record.filter) == (
        "the database is back",
        300,
        {"error": "TimeoutError"},
    )
    left, total = await inspect_dead_letters(settings)
    assert total == 200
    assert {entry.tool_call_id for entry in left} == {call.tool_call_id for call in invalid}
