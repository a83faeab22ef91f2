"""Operating the running system: a poisoned call replayed once fixed, a replay of an applied
call, and the audit stream of a run, with a real worker."""

from __future__ import annotations

import asyncio
import io
import json
import uuid
from pathlib import Path

from aio_pika.abc import AbstractChannel

from contracts import (
    EmbedRequested,
    MemoryStatus,
    MemoryUpdated,
    ToolCallCompleted,
    ToolCallRequested,
    Topology,
    amqp_properties,
    audit_routing_key,
    encode_event,
)
from harness.amqp_proxy import AmqpProxy
from harness.broker import publish_raw, publish_tool_call, tap_events
from harness.services import TestServices, database_refused
from harness.snowflake import snowflake
from harness.waiting import eventually
from harness.world import World, tool_call
from infra.settings import Settings
from ltm.commands.audit import tail_audit
from ltm.commands.dlq import list_dead_letters, replay_dead_letters
from tests.e2e.conftest import new_worker
from tests.integration.operators.seeding import memory_updated


async def _a_memory_and_its_update(world: World) -> tuple[int, ToolCallRequested]:
    """A server memory reading "before", and a call that rewrites it to "after"."""
    server = await world.server()
    persona = await world.persona(server)
    memory_id = await world.server_memory(persona, "before")
    call = tool_call(
        persona, {"memory_id": memory_id, "memory_content": "after"}, triggerer_id=snowflake()
    )
    return memory_id, call


async def test_a_poisoned_call_is_listed_then_replayed_once_fixed_and_applied_once(
    channel: AbstractChannel,
    topology: Topology,
    world: World,
    services: TestServices,
    settings: Settings,
    tmp_path: Path,
) -> None:
    memory_id, call = await _a_memory_and_its_update(world)
    with new_worker(services, tmp_path, "operated", LTM_DB_RETRY_SECONDS="1") as worker:
        await worker.wait_ready_async()
        async with (
            tap_events(channel, topology.events_exchange) as events,
            tap_events(channel, topology.dead_letter_exchange) as dead,
        ):
            async with database_refused(settings.database_url):
                await publish_tool_call(channel, topology, call)
                [failed] = await events.wait_for(ToolCallCompleted, tool_call_id=call.tool_call_id)
                await dead.wait_for_delivery(message_id=str(call.event_id))
            assert failed.status is MemoryStatus.DB_ERROR

            listing = io.StringIO()
            assert await list_dead_letters(settings, out=listing, err=io.StringIO()) == 0
            assert str(call.event_id) in listing.getvalue()
            assert "database unavailable" in listing.getvalue()

            replayed = io.StringIO()
            code = await replay_dead_letters(
                settings, str(call.event_id), out=replayed, err=replayed
            )
            assert code == 0, replayed.getvalue()
            answers = await events.wait_for(ToolCallCompleted, 2, tool_call_id=call.tool_call_id)
            await events.wait_for(EmbedRequested, tool_call_id=call.tool_call_id)

    assert answers[1].status is MemoryStatus.UPDATED
    assert await world.content(memory_id) == "after"
    assert len(await world.revisions_of_call(call.tool_call_id)) == 1
    after = io.StringIO()
    assert await list_dead_letters(settings, out=after, err=io.StringIO()) == 0
    assert str(call.event_id) not in after.getvalue()


async def test_replaying_an_applied_call_changes_nothing(
    channel: AbstractChannel,
    topology: Topology,
    world: World,
    services: TestServices,
    settings: Settings,
    tmp_path: Path,
) -> None:
    memory_id, call = await _a_memory_and_its_update(world)
    with new_worker(services, tmp_path, "replayed") as worker:
        await worker.wait_ready_async()
        async with tap_events(channel, topology.events_exchange) as events:
            await publish_tool_call(channel, topology, call)
            [first] = await events.wait_for(ToolCallCompleted, tool_call_id=call.tool_call_id)
            await events.wait_for(EmbedRequested, tool_call_id=call.tool_call_id)
            # A copy of the applied call in the dead-letter queue, as a crash could leave one.
            properties = amqp_properties(call)
            properties["headers"] = {**properties["headers"], "x-ltm-error": "test: a stale copy"}
            await publish_raw(
                channel,
                topology.dead_letter_exchange,
                encode_event(call),
                call.tool_name,
                **properties,
            )
            out = io.StringIO()
            assert await replay_dead_letters(settings, str(call.event_id), out=out, err=out) == 0
            first_again, second = await events.wait_for(
                ToolCallCompleted, 2, tool_call_id=call.tool_call_id
            )
    assert first_again == first
    assert (second.status, second.message, second.data) == (first.status, first.message, first.data)
    assert len(events.events(EmbedRequested, tool_call_id=call.tool_call_id)) == 1
    assert len(await world.revisions(memory_id)) == 1
    assert await world.content(memory_id) == "after"


async def test_audit_tail_from_first_shows_every_change_of_a_run_in_order(
    channel: AbstractChannel,
    topology: Topology,
    world: World,
    services: TestServices,
    settings: Settings,
    tmp_path: Path,
) -> None:
    server = await world.server()
    persona = await world.persona(server)
    memory_id = await world.server_memory(persona, "v0")
    calls = [
        tool_call(
            persona, {"memory_id": memory_id, "memory_content": f"v{n}"}, triggerer_id=snowflake()
        )
        for n in range(1, 6)
    ]
    with new_worker(services, tmp_path, "audited") as worker:
        await worker.wait_ready_async()
        async with tap_events(channel, topology.events_exchange, ["memory.#"]) as audit:
            for call in calls:  # one after the other: the order of the run is known
                await publish_tool_call(channel, topology, call)
                await audit.wait_for(MemoryUpdated, tool_call_id=call.tool_call_id)

    out = io.StringIO()
    assert await tail_audit(settings, "first", as_json=True, out=out, err=io.StringIO()) == 0
    ours = {call.tool_call_id for call in calls}
    printed = [json.loads(line) for line in out.getvalue().splitlines() if line.strip()]
    # The stream holds the changes of the run, not their results, embeds or invalidations.
    assert {event["event_type"] for event in printed if event.get("tool_call_id") in ours} == {
        "memory.updated"
    }
    tailed = [
        event
        for event in printed
        if event.get("tool_call_id") in ours and event["event_type"] == "memory.updated"
    ]
    assert [event["tool_call_id"] for event in tailed] == [call.tool_call_id for call in calls]
    # The texts come from the revisions, joined by `ltm audit tail --json`.
    assert [event["content_after"] for event in tailed] == ["v1", "v2", "v3", "v4", "v5"]
    assert not any(event["erased"] for event in tailed)
    revisions = await world.revisions(memory_id)
    assert [event["revision_id"] for event in tailed] == [r["revision_id"] for r in revisions]


async def test_audit_tail_without_follow_ends_while_events_keep_coming(
    channel: AbstractChannel, topology: Topology, settings: Settings
) -> None:
    # An event every 0.1 s: never a second without one, the idle interval that ends a tail.
    publishing = asyncio.create_task(_publish_events_forever(channel, topology))
    try:
        code = await asyncio.wait_for(
            tail_audit(settings, "last", out=io.StringIO(), err=io.StringIO()),
            timeout=20,
        )
        assert not publishing.done()
    finally:
        publishing.cancel()
    assert code == 0


async def test_audit_tail_ends_with_exit_1_when_the_broker_connection_is_lost(
    channel: AbstractChannel, topology: Topology, settings: Settings
) -> None:
    async with AmqpProxy(settings.amqp_url) as proxy:
        through = settings.model_copy(update={"amqp_url": proxy.url(heartbeat_s=1)})
        out, err = io.StringIO(), io.StringIO()
        tail = asyncio.create_task(tail_audit(through, "last", follow=True, out=out, err=err))
        event = _a_change()

        async def tailing() -> bool:  # "last" may start past a first copy: send it again
            await _publish_event(channel, topology, event)
            return event.tool_call_id in out.getvalue()

        await eventually(tailing, timeout=20, interval=0.5, what="the tail printing an event")
        proxy.drop()
        code = await asyncio.wait_for(tail, timeout=20)
    assert code == 1
    assert "connection was lost" in err.getvalue()


async def _publish_events_forever(channel: AbstractChannel, topology: Topology) -> None:
    while True:
        await _publish_event(channel, topology, _a_change())
        await asyncio.sleep(0.1)


def _a_change() -> MemoryUpdated:
    """An audit event of its own (its revision need not exist: the tail says so)."""
    return memory_updated(f"tc-{uuid.uuid4()}", 1)


async def _publish_event(
    channel: AbstractChannel, topology: Topology, event: MemoryUpdated
) -> None:
    # The stream takes the audit events alone: an invalidation would not reach it.
    await publish_raw(
        channel,
        topology.events_exchange,
        encode_event(event),
        audit_routing_key("updated", event.scope),
        **amqp_properties(event),
    )
