"""What survives each crash: SIGKILL at every step, two workers, a lost broker, a lost database."""

from __future__ import annotations

import asyncio
import functools
import json
import uuid
from pathlib import Path

import aio_pika
import psycopg
import pytest
from aio_pika.abc import AbstractChannel

from contracts import (
    CacheInvalidate,
    EmbedRequested,
    MemoryStatus,
    MemoryUpdated,
    ToolCallCompleted,
    ToolCallRequested,
    Topology,
)
from harness.broker import (
    EventTap,
    delete_topology,
    publish_tool_call,
    queue_depth,
    tap_events,
)
from harness.processes import LtmProcess
from harness.services import TestServices, database_refused, rabbitmqctl
from harness.snowflake import snowflake
from harness.waiting import eventually
from harness.world import Persona, World, tool_call
from infra.settings import Settings
from tests.e2e.conftest import new_worker


async def _memories(world: World, persona: Persona, count: int) -> list[int]:
    return [await world.server_memory(persona, f"memory {n} v0") for n in range(count)]


def _updates(persona: Persona, memory_ids: list[int], version: int) -> list[ToolCallRequested]:
    return [
        tool_call(
            persona,
            {"memory_id": memory_id, "memory_content": f"memory {n} v{version}"},
            triggerer_id=snowflake(),
        )
        for n, memory_id in enumerate(memory_ids)
    ]


def _answered_once_each(tap: EventTap, calls: list[ToolCallRequested]) -> bool:
    answered = {event.tool_call_id for event in tap.events(ToolCallCompleted)}
    return all(call.tool_call_id in answered for call in calls)


@pytest.mark.parametrize("failpoint", ["after_commit", "after_publish", "after_mark"])
async def test_sigkill_between_commit_and_ack_applies_once_and_still_answers(
    channel: AbstractChannel,
    topology: Topology,
    world: World,
    services: TestServices,
    tmp_path: Path,
    failpoint: str,
) -> None:
    server = await world.server()
    persona = await world.persona(server)
    [memory_id] = await _memories(world, persona, 1)
    [call] = _updates(persona, [memory_id], 1)
    # The doomed worker dies at the first call it takes: it must be this one, not a call an
    # earlier module's test left in the run's work queue.
    await (await channel.declare_queue(topology.worker_queue, passive=True)).purge()
    async with tap_events(channel, topology.events_exchange) as tap:
        with new_worker(services, tmp_path, "doomed", LTM_FAILPOINTS=failpoint) as doomed:
            await doomed.wait_ready_async()
            await publish_tool_call(channel, topology, call)
            exit_code = await asyncio.to_thread(doomed.wait_exit, 30)
        assert exit_code == -9, "the worker was meant to die by SIGKILL at the failpoint"
        # Committed before the crash: the change is there, once.
        assert await world.content(memory_id) == "memory 0 v1"
        with new_worker(
            services, tmp_path, "successor", LTM_OUTBOX_SWEEP_INTERVAL_S="0.2"
        ) as successor:
            await successor.wait_ready_async()
            await tap.wait_for(ToolCallCompleted, tool_call_id=call.tool_call_id, timeout=30)
            await tap.wait_for(EmbedRequested, tool_call_id=call.tool_call_id, timeout=30)
            await tap.wait_for(MemoryUpdated, tool_call_id=call.tool_call_id, timeout=30)
    assert len(await world.revisions(memory_id)) == 1
    assert {r.status for r in tap.events(ToolCallCompleted, tool_call_id=call.tool_call_id)} == {
        MemoryStatus.UPDATED
    }
    # The embed and the invalidation are events of the committed change: published once,
    # or again under the same event_id (after_publish), which consumers deduplicate.
    embeds = tap.events(EmbedRequested, tool_call_id=call.tool_call_id)
    assert len({embed.event_id for embed in embeds}) == 1
    invalidations = tap.events(CacheInvalidate, tool_call_id=call.tool_call_id)
    assert len({event.event_id for event in invalidations}) == 1


async def test_two_workers_apply_each_call_exactly_once(
    channel: AbstractChannel,
    topology: Topology,
    world: World,
    services: TestServices,
    tmp_path: Path,
) -> None:
    server = await world.server()
    persona = await world.persona(server)
    memory_ids = await _memories(world, persona, 60)
    calls = _updates(persona, memory_ids, 1)
    async with tap_events(channel, topology.events_exchange) as tap:
        with (
            new_worker(services, tmp_path, "one", LTM_PREFETCH="8") as one,
            new_worker(services, tmp_path, "two", LTM_PREFETCH="8") as two,
        ):
            await asyncio.gather(one.wait_ready_async(), two.wait_ready_async())
            # Every call published twice: the copies race each other across the two workers.
            await asyncio.gather(*(publish_tool_call(channel, topology, c) for c in calls * 2))
            await tap.wait_until(
                lambda t: len(t.events(ToolCallCompleted)) >= 2 * len(calls),
                timeout=60,
                what="two answers per call",
            )
            # Both took their share (the metric's name alone is listed before any call).
            assert await one.calls_answered() > 0 and await two.calls_answered() > 0
    for call, memory_id in zip(calls, memory_ids, strict=True):
        assert len(await world.revisions_of_call(call.tool_call_id)) == 1
        assert len(tap.events(EmbedRequested, tool_call_id=call.tool_call_id)) == 1
        statuses = {r.status for r in tap.events(ToolCallCompleted, tool_call_id=call.tool_call_id)}
        assert statuses == {MemoryStatus.UPDATED}
        assert await world.content(memory_id) == call.arguments["memory_content"]  # type: ignore[index,call-overload]


async def test_work_goes_on_after_the_broker_closes_every_connection(
    topology: Topology,
    world: World,
    services: TestServices,
    settings: Settings,
    tmp_path: Path,
) -> None:
    if services.vhost is None:
        pytest.fail("this test needs rabbitmqctl and a virtual host of its own")
    server = await world.server()
    persona = await world.persona(server)
    memory_ids = await _memories(world, persona, 10)
    before, after = _updates(persona, memory_ids[:5], 1), _updates(persona, memory_ids[5:], 1)
    with new_worker(services, tmp_path, "survivor") as worker:
        await worker.wait_ready_async()
        for calls in (before, after):
            # A connection of the test's own for each round: the closure ends it too.
            connection = await aio_pika.connect(settings.amqp_url)
            async with connection:
                own = await connection.channel()
                async with tap_events(own, topology.events_exchange) as tap:
                    for call in calls:
                        await publish_tool_call(own, topology, call)
                    await tap.wait_until(
                        functools.partial(_answered_once_each, calls=calls),
                        timeout=30,
                        what="every call answered",
                    )
                if calls is before:
                    await asyncio.to_thread(
                        rabbitmqctl, "close_all_connections", "-p", services.vhost, "chaos test"
                    )
            if calls is before:
                await eventually(
                    lambda: worker.logged("worker.broker_connection_lost"),
                    what="the worker noticing",
                )
                await worker.wait_ready_async(timeout=30)
    for call in before + after:
        assert len(await world.revisions_of_call(call.tool_call_id)) == 1


async def test_a_channel_the_broker_closes_makes_the_worker_start_over(
    channel: AbstractChannel,
    world: World,
    services: TestServices,
    tmp_path: Path,
) -> None:
    # A topology of its own: the events exchange is deleted under the worker.
    topology = Topology(f"{services.amqp_prefix}x{uuid.uuid4().hex[:6]}")
    persona = await world.persona(await world.server())
    memory_ids = await _memories(world, persona, 2)
    first, second = _updates(persona, memory_ids, 1)
    try:
        with new_worker(services, tmp_path, "worker", LTM_AMQP_PREFIX=topology.prefix) as worker:
            await worker.wait_ready_async()
            await channel.exchange_delete(topology.events_exchange)
            # The first answer goes nowhere: the broker closes the publishing channel, and the
            # worker starts over on a new connection, declaring the exchange again.
            await publish_tool_call(channel, topology, first)
            await eventually(
                lambda: worker.logged("worker.broker_connection_lost"),
                timeout=30,
                what="the worker starting over",
            )
            await worker.wait_ready_async(timeout=30)
            async with tap_events(channel, topology.events_exchange) as tap:
                await publish_tool_call(channel, topology, second)
                await tap.wait_for(ToolCallCompleted, tool_call_id=second.tool_call_id)
            # The first comes again and is answered from its stored result.
            await eventually(lambda: _answered(worker, 2), timeout=30, what="both calls answered")
    finally:
        await delete_topology(channel, topology)
    for call, memory_id in zip((first, second), memory_ids, strict=True):
        assert len(await world.revisions_of_call(call.tool_call_id)) == 1
        assert await world.content(memory_id) == call.arguments["memory_content"]  # type: ignore[index,call-overload]


async def _answered(worker: LtmProcess, count: int) -> bool:
    return await worker.calls_answered() >= count


async def test_a_row_locked_from_outside_fails_its_call_and_no_other(
    channel: AbstractChannel,
    topology: Topology,
    world: World,
    services: TestServices,
    settings: Settings,
    tmp_path: Path,
) -> None:
    persona = await world.persona(await world.server())
    memory_ids = await _memories(world, persona, 10)
    locked, *free = _updates(persona, memory_ids, 1)
    # An operator's session left open on one row: without a lock timeout the worker waited
    # on it for good, and every call behind it with it.
    holder = await psycopg.AsyncConnection.connect(settings.database_url)
    try:
        await holder.execute(
            "SELECT 1 FROM server_memories WHERE server_memory_id = %s FOR UPDATE",
            (memory_ids[0],),
        )
        async with (
            tap_events(channel, topology.events_exchange) as tap,
            tap_events(channel, topology.dead_letter_exchange) as dead,
        ):
            # Queued before the worker starts, so that they share its first transaction.
            for call in (locked, *free):
                await publish_tool_call(channel, topology, call)
            with new_worker(
                services,
                tmp_path,
                "worker",
                LTM_DB_LOCK_TIMEOUT_S="0.5",
                LTM_DB_RETRY_SECONDS="1",
            ) as worker:
                await tap.wait_until(
                    functools.partial(_answered_once_each, calls=[locked, *free]),
                    timeout=30,
                    what="every call answered",
                )
                await dead.wait_for_delivery(message_id=str(locked.event_id))
    finally:
        await holder.close()
    statuses = {r.tool_call_id: r.status for r in tap.events(ToolCallCompleted)}
    assert statuses[locked.tool_call_id] is MemoryStatus.DB_ERROR
    assert {statuses[call.tool_call_id] for call in free} == {MemoryStatus.UPDATED}
    assert await world.content(memory_ids[0]) == "memory 0 v0"
    # The lock wait is retried by the held call alone, not first by the whole batch.
    retried = [
        entry["batch"]
        for entry in map(json.loads, worker.output().splitlines())
        if entry.get("event") == "worker.db_retrying"
    ]
    assert retried and set(retried) == {1}
    for call, memory_id in zip(free, memory_ids[1:], strict=True):
        assert await world.content(memory_id) == call.arguments["memory_content"]  # type: ignore[index,call-overload]


async def test_database_unreachable_answers_db_error_and_dead_letters(
    channel: AbstractChannel,
    topology: Topology,
    world: World,
    services: TestServices,
    settings: Settings,
    tmp_path: Path,
) -> None:
    server = await world.server()
    persona = await world.persona(server)
    [memory_id] = await _memories(world, persona, 1)
    [call] = _updates(persona, [memory_id], 1)
    with new_worker(services, tmp_path, "stranded", LTM_DB_RETRY_SECONDS="1") as worker:
        await worker.wait_ready_async()
        async with (
            tap_events(channel, topology.events_exchange, ["result.#"]) as results,
            tap_events(channel, topology.dead_letter_exchange) as dead,
            database_refused(settings.database_url),
        ):
            await publish_tool_call(channel, topology, call)
            [result] = await results.wait_for(
                ToolCallCompleted, tool_call_id=call.tool_call_id, timeout=30
            )
            await dead.wait_for_delivery(correlation_id=call.tool_call_id)
    assert result.status is MemoryStatus.DB_ERROR and not result.success
    [copy] = dead.deliveries_with(correlation_id=call.tool_call_id)
    assert "database unavailable" in str(copy.headers["x-ltm-error"])
    assert await world.content(memory_id) == "memory 0 v0"
    assert await world.inbox(call.tool_call_id) is None


async def test_sigterm_drains_in_flight_calls_and_exits_zero(
    channel: AbstractChannel,
    topology: Topology,
    world: World,
    services: TestServices,
    tmp_path: Path,
) -> None:
    server = await world.server()
    persona = await world.persona(server)
    memory_ids = await _memories(world, persona, 40)
    calls = _updates(persona, memory_ids, 1)
    with new_worker(services, tmp_path, "graceful") as worker:
        await worker.wait_ready_async()
        async with tap_events(channel, topology.events_exchange, ["result.#"]) as tap:
            for call in calls:
                await publish_tool_call(channel, topology, call)
            await tap.wait_for(ToolCallCompleted, 1)
            exit_code = await asyncio.to_thread(worker.terminate, 30)
            assert exit_code == 0, worker.output()
            # The answers published before the exit may still be on their way to the tap:
            # wait for one of each call the worker recorded, not for a length of time.
            recorded = {call.tool_call_id for call in calls if await world.inbox(call.tool_call_id)}
            await tap.wait_until(
                lambda t: recorded <= {e.tool_call_id for e in t.events(ToolCallCompleted)},
                what="an answer to every call the worker took",
            )
            ours = {call.tool_call_id for call in calls}
            answered = {e.tool_call_id for e in tap.events(ToolCallCompleted)} & ours
        assert "worker.stopped" in worker.output()
    assert answered == recorded
    # Whatever it had taken it answered; whatever it had not is still queued, untouched.
    for n, (call, memory_id) in enumerate(zip(calls, memory_ids, strict=True)):
        applied = len(await world.revisions_of_call(call.tool_call_id))
        if call.tool_call_id in answered:
            assert applied == 1
        else:
            assert applied == 0
            assert await world.content(memory_id) == f"memory {n} v0"

    async def depth_is(expected: int) -> bool:
        return await queue_depth(channel, topology.worker_queue) == expected

    # The broker requeues what the worker held when it closes its connection.
    await eventually(
        functools.partial(depth_is, len(calls) - len(answered)),
        timeout=10,
        what="the calls not taken back in the queue",
    )

    async def drained() -> bool:
        return await depth_is(0)

    # Leave the queue empty for the next tests.
    with new_worker(services, tmp_path, "cleanup") as cleanup:
        await cleanup.wait_ready_async()
        await eventually(drained, what="the work queue drained")
