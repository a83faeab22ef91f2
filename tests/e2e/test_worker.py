"""A tool call published to the broker, through the real worker and database, to its events."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from aio_pika.abc import AbstractChannel

from contracts import (
    CacheInvalidate,
    EmbedRequested,
    MemoryDeleted,
    MemoryStatus,
    MemoryUpdated,
    ToolCallCompleted,
    Topology,
)
from harness.broker import publish_raw, publish_tool_call, tap_events
from harness.processes import LtmProcess
from harness.snowflake import snowflake
from harness.waiting import eventually
from harness.world import World, participant, tool_call

pytestmark = pytest.mark.usefixtures("worker_process")


@pytest.mark.parametrize("shard_id", [0, 8_000])
async def test_server_update_sends_result_embed_invalidation_and_audit(
    channel: AbstractChannel, topology: Topology, world: World, shard_id: int
) -> None:
    server = await world.server()
    persona = await world.persona(server, nickname="Tomori")
    memory_id = await world.server_memory(persona, "likes tea")
    triggerer = snowflake()
    call = tool_call(
        persona,
        {"memory_id": memory_id, "memory_content": "likes green tea"},
        triggerer_id=triggerer,
        participants=(participant(triggerer, "Bob"),),
        shard_id=shard_id,
    )
    async with tap_events(channel, topology.events_exchange) as tap:
        await publish_tool_call(channel, topology, call)
        [result] = await tap.wait_for(ToolCallCompleted, tool_call_id=call.tool_call_id)
        await tap.wait_for(MemoryUpdated, tool_call_id=call.tool_call_id)
        await tap.wait_for(CacheInvalidate, tool_call_id=call.tool_call_id)
        [embed] = await tap.wait_for(EmbedRequested, tool_call_id=call.tool_call_id)

    assert result.status is MemoryStatus.UPDATED
    assert result.shard_id == shard_id and result.causation_id == call.event_id
    assert await world.content(memory_id) == "likes green tea"
    keys = {d.routing_key for d in tap.deliveries_with(correlation_id=call.tool_call_id)}
    assert keys == {
        f"result.shard.{shard_id}",
        f"embed.shard.{shard_id}",
        f"cache.persona_state.{server.disc_id}",
        "memory.updated.server_wide",
    }
    assert embed.channel_id == call.context.channel_id
    assert embed.embed.color == 0x25D4DA
    [result_delivery] = [
        d
        for d in tap.deliveries_with(correlation_id=call.tool_call_id)
        if d.routing_key == f"result.shard.{shard_id}"
    ]
    assert result_delivery.properties["message_id"] == str(result.event_id)
    assert result_delivery.properties["type"] == "tool_call.completed"
    assert result_delivery.properties["content_type"] == "application/json"
    assert result_delivery.properties["expiration"] is not None
    assert result_delivery.headers["schema_version"] == 1


async def test_personal_delete_invalidates_the_owner(
    channel: AbstractChannel, topology: Topology, world: World
) -> None:
    server = await world.server()
    persona = await world.persona(server)
    owner_id, owner_disc = await world.user()
    memory_id = await world.personal_memory(owner_id, 0, "owns a cat")
    triggerer = snowflake()
    call = tool_call(
        persona,
        {"memory_id": memory_id, "memory_content": "  ", "target_user": "@Carol"},
        triggerer_id=triggerer,
        participants=(participant(triggerer, "Bob"), participant(owner_disc, "Carol")),
    )
    async with tap_events(channel, topology.events_exchange) as tap:
        await publish_tool_call(channel, topology, call)
        [result] = await tap.wait_for(ToolCallCompleted, tool_call_id=call.tool_call_id)
        [audit] = await tap.wait_for(MemoryDeleted, tool_call_id=call.tool_call_id)
        [invalidation] = await tap.wait_for(CacheInvalidate, tool_call_id=call.tool_call_id)
    assert result.status is MemoryStatus.DELETED
    assert result.data.content_deleted == "owns a cat"
    assert invalidation.cache == "user" and invalidation.key == owner_disc
    assert audit.owner_id == owner_disc
    assert await world.content(memory_id) is None
    [revision] = await world.revisions_of_call(call.tool_call_id)
    assert revision["revision_id"] == audit.revision_id and revision["content_after"] is None


@pytest.mark.parametrize(
    ("arguments", "status"),
    [
        ({"memory_id": "24", "memory_content": "x"}, MemoryStatus.INVALID_ARGS),
        ({"memory_id": 987654321987, "memory_content": "x"}, MemoryStatus.NOT_FOUND),
        ({"memory_id": 1, "memory_content": "x" * 2000}, MemoryStatus.INVALID_CONTENT),
        (
            {"memory_id": 1, "memory_content": "x", "target_user": "nobody"},
            MemoryStatus.USER_NOT_FOUND,
        ),
    ],
)
async def test_failures_answer_with_a_status_and_send_nothing_else(
    channel: AbstractChannel,
    topology: Topology,
    world: World,
    arguments: dict[str, object],
    status: MemoryStatus,
) -> None:
    server = await world.server()
    persona = await world.persona(server)
    call = tool_call(persona, arguments, triggerer_id=snowflake())
    async with tap_events(channel, topology.events_exchange) as tap:
        await publish_tool_call(channel, topology, call)
        [result] = await tap.wait_for(ToolCallCompleted, tool_call_id=call.tool_call_id)
        # The answer is published once committed: the inbox holds it by now.
        assert (await world.inbox(call.tool_call_id) or {}).get("status") == status.value
    assert result.status is status and not result.success and result.message
    related = tap.deliveries_with(correlation_id=call.tool_call_id)
    assert [d.routing_key for d in related] == ["result.shard.0"]
    # What is published later is in the outbox already, committed with the answer.
    outbox = await world.outbox_of_call(call.tool_call_id)
    assert [row["routing_key"] for row in outbox] == ["result.shard.0"]
    assert await world.revisions_of_call(call.tool_call_id) == []


async def test_disabled_server_answers_disabled(
    channel: AbstractChannel, topology: Topology, world: World
) -> None:
    server = await world.server(self_teaching_enabled=False)
    persona = await world.persona(server)
    memory_id = await world.server_memory(persona, "unchanged")
    call = tool_call(
        persona, {"memory_id": memory_id, "memory_content": "new"}, triggerer_id=snowflake()
    )
    async with tap_events(channel, topology.events_exchange, ["result.#"]) as tap:
        await publish_tool_call(channel, topology, call)
        [result] = await tap.wait_for(ToolCallCompleted, tool_call_id=call.tool_call_id)
    assert result.status is MemoryStatus.DISABLED
    assert await world.content(memory_id) == "unchanged"


async def test_a_duplicate_publish_is_answered_again_and_applied_once(
    channel: AbstractChannel, topology: Topology, world: World, worker_process: LtmProcess
) -> None:
    server = await world.server()
    persona = await world.persona(server)
    memory_id = await world.server_memory(persona, "v1")
    call = tool_call(
        persona, {"memory_id": memory_id, "memory_content": "v2"}, triggerer_id=snowflake()
    )
    async with tap_events(channel, topology.events_exchange) as tap:
        await publish_tool_call(channel, topology, call)
        await tap.wait_for(EmbedRequested, tool_call_id=call.tool_call_id)
        await publish_tool_call(channel, topology, call)
        first, second = await tap.wait_for(ToolCallCompleted, 2, tool_call_id=call.tool_call_id)
    assert (first.status, first.message, first.data) == (second.status, second.message, second.data)
    assert first.event_id != second.event_id
    assert len(tap.events(EmbedRequested, tool_call_id=call.tool_call_id)) == 1
    assert len(tap.events(CacheInvalidate, tool_call_id=call.tool_call_id)) == 1
    assert len(await world.revisions(memory_id)) == 1
    # The counter moves after the ack, which follows the published answer.
    await eventually(
        lambda: _metrics_show(worker_process, 'replayed="true"'), what="the replay counted"
    )


async def test_a_different_call_under_a_used_id_is_refused_and_nothing_is_written(
    channel: AbstractChannel, topology: Topology, world: World, worker_process: LtmProcess
) -> None:
    """A copy of a call file with new content and the same tool_call_id (issue 13)."""
    server = await world.server()
    persona = await world.persona(server)
    memory_id = await world.server_memory(persona, "v1")
    call = tool_call(
        persona, {"memory_id": memory_id, "memory_content": "v2"}, triggerer_id=snowflake()
    )
    reused = call.model_copy(
        update={
            "event_id": uuid.uuid4(),
            "arguments": {"memory_id": memory_id, "memory_content": "v3"},
        }
    )
    async with tap_events(channel, topology.events_exchange) as tap:
        await publish_tool_call(channel, topology, call)
        await tap.wait_for(EmbedRequested, tool_call_id=call.tool_call_id)
        inbox = await world.inbox(call.tool_call_id)
        outbox = await world.outbox_of_call(call.tool_call_id)
        await publish_tool_call(channel, topology, reused)
        await tap.wait_for(ToolCallCompleted, 2, tool_call_id=call.tool_call_id)

    [refusal] = tap.events(ToolCallCompleted, causation_id=reused.event_id)
    assert refusal.status is MemoryStatus.INVALID_ARGS, refusal
    assert not refusal.success
    assert refusal.data.reason == "tool_call_id_reused"
    assert "already used for a different call" in refusal.message
    # Nothing of it written or sent: one change, one embed, one invalidation, one audit event,
    # the record and the outbox rows of the first call as they were.
    assert await world.content(memory_id) == "v2"
    assert len(await world.revisions(memory_id)) == 1
    assert len(tap.events(EmbedRequested, tool_call_id=call.tool_call_id)) == 1
    assert len(tap.events(CacheInvalidate, tool_call_id=call.tool_call_id)) == 1
    assert len(tap.events(MemoryUpdated, tool_call_id=call.tool_call_id)) == 1
    assert await world.inbox(call.tool_call_id) == inbox
    rows = await world.outbox_of_call(call.tool_call_id)
    assert [row["event_id"] for row in rows] == [row["event_id"] for row in outbox]
    line = await eventually(
        lambda: _logged_line(worker_process, "worker.tool_call_id_reused"),
        what="the refusal logged",
    )
    assert line["level"] == "warning"
    assert line["tool_call_id"] == call.tool_call_id


async def test_a_burst_is_answered_and_every_event_marked_published_by_the_worker(
    channel: AbstractChannel, topology: Topology, world: World, worker_process: LtmProcess
) -> None:
    # Calls arriving together share transactions, and a later batch's commit marks the
    # earlier batches' confirmed rows: none is left for the sweep.
    server = await world.server()
    persona = await world.persona(server)
    memory_ids = [await world.server_memory(persona, f"v{n}") for n in range(40)]
    calls = [
        tool_call(persona, {"memory_id": memory_id, "memory_content": "burst"}, triggerer_id="1")
        for memory_id in memory_ids
    ]
    async with tap_events(channel, topology.events_exchange) as tap:
        for call in calls:
            await publish_tool_call(channel, topology, call)
        for call in calls:
            [result] = await tap.wait_for(ToolCallCompleted, tool_call_id=call.tool_call_id)
            assert result.status is MemoryStatus.UPDATED

    async def all_marked() -> bool:
        rows = [row for call in calls for row in await world.outbox_of_call(call.tool_call_id)]
        assert len(rows) == 4 * len(calls)
        return all(row["published_at"] is not None for row in rows)

    await eventually(all_marked, timeout=4.0, what="every outbox row marked published")
    await eventually(
        lambda: _nothing_in_flight(worker_process), timeout=4.0, what="every call acked"
    )
    assert [await world.content(memory_id) for memory_id in memory_ids] == ["burst"] * 40


async def _logged_line(worker: LtmProcess, text: str) -> dict[str, Any] | None:
    """The first JSON log line of the worker holding `text`, once there is one."""
    for line in worker.output().splitlines():
        if text in line:
            parsed: dict[str, Any] = json.loads(line)
            return parsed
    return None


async def _metrics_show(worker: LtmProcess, text: str) -> bool:
    return text in await worker.metrics()


async def _nothing_in_flight(worker: LtmProcess) -> bool:
    return "ltm_tool_calls_in_flight 0.0" in (await worker.metrics()).splitlines()


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"not json at all", "invalid envelope"),
        (b'{"schema_version": 2, "event_type": "tool_call.requested"}', "schema_version"),
        (None, "context"),
    ],
    ids=["malformed", "unknown-schema-version", "missing-context"],
)
async def test_bad_envelopes_are_dead_lettered_with_a_reason(
    channel: AbstractChannel,
    topology: Topology,
    world: World,
    body: bytes | None,
    reason: str,
) -> None:
    tool_call_id = f"bad-{uuid.uuid4()}"
    if body is None:
        body = (
            b'{"event_id": "%s", "event_type": "tool_call.requested", "schema_version": 1,'
            b' "occurred_at": "2026-01-01T00:00:00Z", "tool_call_id": "%s",'
            b' "tool_name": "update_long_term_memory", "arguments": {}}'
            % (str(uuid.uuid4()).encode(), tool_call_id.encode())
        )
    message_id = str(uuid.uuid4())
    async with tap_events(channel, topology.dead_letter_exchange) as dead:
        await publish_raw(
            channel,
            topology.tool_calls_exchange,
            body,
            "update_long_term_memory",
            message_id=message_id,
            correlation_id=tool_call_id,
            headers={"schema_version": 1},
        )
        await dead.wait_for_delivery(message_id=message_id)
    [copy] = dead.deliveries_with(message_id=message_id)
    assert copy.body == body
    assert copy.routing_key == "update_long_term_memory"
    assert reason in str(copy.headers["x-ltm-error"])
    assert copy.headers["x-ltm-failed-at"]
    assert await world.inbox(tool_call_id) is None
