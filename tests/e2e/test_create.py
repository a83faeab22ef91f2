"""The create tool through the broker and real `ltm worker` processes: its events on the wire,
its statuses, a database away, a tool name no pipeline takes, and two workers racing at a
scope's limit."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from aio_pika.abc import AbstractChannel
from prometheus_client.parser import text_string_to_metric_families

from contracts import (
    CREATE_LONG_TERM_MEMORY,
    REMEMBER_THIS_FACT,
    CacheInvalidate,
    EmbedRequested,
    MemoryCreated,
    MemoryStatus,
    ToolCallCompleted,
    ToolCallRequested,
    encode_event,
)
from harness.broker import own_topology, publish_raw, publish_tool_call, tap_events
from harness.processes import LtmProcess
from harness.services import TestServices, database_refused
from harness.snowflake import snowflake
from harness.waiting import eventually
from harness.world import Persona, World, participant, tool_call
from infra.settings import Settings
from tests.e2e.conftest import new_worker


def create(
    persona: Persona,
    arguments: Any,
    *,
    tool_name: str = CREATE_LONG_TERM_MEMORY,
    triggerer_id: str | None = None,
    **options: Any,
) -> ToolCallRequested:
    return tool_call(
        persona,
        arguments,
        triggerer_id=triggerer_id or snowflake(),
        tool_name=tool_name,
        **options,
    )


async def _contents(world: World, sql: str, *params: Any) -> list[str]:
    return [row["content"] for row in await world.execute(sql, *params)]


@pytest.mark.usefixtures("worker_process")
@pytest.mark.parametrize("tool_name", [CREATE_LONG_TERM_MEMORY, REMEMBER_THIS_FACT])
async def test_a_creation_sends_result_green_embed_invalidation_and_audit(
    channel: AbstractChannel, topology: Any, world: World, tool_name: str
) -> None:
    server = await world.server()
    persona = await world.persona(server, nickname="Tomori")
    triggerer = snowflake()
    call = create(
        persona,
        {"memory_content": "{user} runs the book club", "memory_scope": "server_wide"},
        tool_name=tool_name,
        triggerer_id=triggerer,
        participants=(participant(triggerer, "Bob"),),
        shard_id=3,
    )
    async with tap_events(channel, topology.events_exchange) as tap:
        await publish_tool_call(channel, topology, call)
        [result] = await tap.wait_for(ToolCallCompleted, tool_call_id=call.tool_call_id)
        [embed] = await tap.wait_for(EmbedRequested, tool_call_id=call.tool_call_id)
        [audit] = await tap.wait_for(MemoryCreated, tool_call_id=call.tool_call_id)
        await tap.wait_for(CacheInvalidate, tool_call_id=call.tool_call_id)

    assert result.status is MemoryStatus.SAVED and result.success
    assert result.tool_name == tool_name
    memory_id = result.data.memory_id
    assert memory_id is not None
    assert await world.content(memory_id) == "{user} runs the book club"
    keys = {d.routing_key for d in tap.deliveries_with(correlation_id=call.tool_call_id)}
    assert keys == {
        "result.shard.3",
        "embed.shard.3",
        f"cache.persona_state.{server.disc_id}",
        "memory.created.server_wide",
    }
    assert embed.kind == "memory_created" and embed.embed.color == 3066993
    assert "Bob runs the book club" in embed.embed.description
    assert audit.memory_id == memory_id and audit.actor_id == triggerer
    [revision] = await world.revisions(memory_id)
    assert revision["action"] == "created" and revision["revision_id"] == audit.revision_id
    # The texts are the revision's, which the audit event names.
    assert (revision["content_before"], revision["content_after"]) == (
        "",
        "{user} runs the book club",
    )


@pytest.mark.usefixtures("worker_process")
@pytest.mark.parametrize(
    ("arguments", "status"),
    [
        ({"memory_content": "x", "memory_scope": "channel"}, MemoryStatus.SAVE_INVALID_ARGS),
        (
            {"memory_content": " \u200b ", "memory_scope": "server_wide"},
            MemoryStatus.SAVE_INVALID_CONTENT,
        ),
        (
            {"memory_content": "x", "memory_scope": "target_user", "target_user": "nobody"},
            MemoryStatus.SAVE_USER_NOT_FOUND,
        ),
        ({"memory_content": "seeded", "memory_scope": "server_wide"}, MemoryStatus.SAVE_DUPLICATE),
    ],
)
async def test_failures_answer_with_a_status_and_send_nothing_else(
    channel: AbstractChannel,
    topology: Any,
    world: World,
    arguments: dict[str, Any],
    status: MemoryStatus,
) -> None:
    server = await world.server()
    persona = await world.persona(server)
    await world.server_memory(persona, "Seeded")
    call = create(persona, arguments)
    async with tap_events(channel, topology.events_exchange) as tap:
        await publish_tool_call(channel, topology, call)
        [result] = await tap.wait_for(ToolCallCompleted, tool_call_id=call.tool_call_id)
        # A later call's answer: whatever the first sent, it has arrived by then.
        marker = create(persona, {"memory_content": 1})
        await publish_tool_call(channel, topology, marker)
        await tap.wait_for(ToolCallCompleted, tool_call_id=marker.tool_call_id)

    assert result.status is status and not result.success
    assert [d.routing_key for d in tap.deliveries_with(correlation_id=call.tool_call_id)] == [
        "result.shard.0"
    ]
    assert await world.revisions_of_call(call.tool_call_id) == []


@pytest.mark.usefixtures("worker_process")
async def test_a_tool_name_no_pipeline_takes_is_dead_lettered_with_the_reason(
    channel: AbstractChannel, topology: Any, world: World
) -> None:
    """Bound by hand to the worker's queue: the worker takes it, and gives it up, saying why."""
    server = await world.server()
    persona = await world.persona(server)
    call = create(persona, {"memory_content": "x"}, tool_name="forget_everything")
    tool_calls = await channel.get_exchange(topology.tool_calls_exchange, ensure=False)
    queue = await channel.get_queue(topology.worker_queue, ensure=False)
    await queue.bind(tool_calls, routing_key="forget_everything")
    try:
        async with tap_events(channel, topology.dead_letter_exchange) as dead:
            await publish_raw(
                channel,
                topology.tool_calls_exchange,
                encode_event(call),
                "forget_everything",
                message_id=str(call.event_id),
                correlation_id=call.tool_call_id,
                headers={"schema_version": 1},
            )
            [copy] = await dead.wait_for_delivery(correlation_id=call.tool_call_id)
    finally:
        await queue.unbind(tool_calls, routing_key="forget_everything")
    assert copy.routing_key == "forget_everything"
    assert "unsupported tool 'forget_everything'" in str(copy.headers["x-ltm-error"])
    assert await world.inbox(call.tool_call_id) is None


async def test_database_unreachable_answers_save_db_error_and_dead_letters(
    channel: AbstractChannel,
    topology: Any,
    world: World,
    services: TestServices,
    settings: Settings,
    tmp_path: Path,
) -> None:
    server = await world.server()
    persona = await world.persona(server)
    call = create(persona, {"memory_content": "x", "memory_scope": "server_wide"})
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
            [copy] = await dead.wait_for_delivery(correlation_id=call.tool_call_id)
    assert result.status is MemoryStatus.SAVE_DB_ERROR and not result.success
    assert "not saved" in result.message
    assert copy.routing_key == CREATE_LONG_TERM_MEMORY
    assert "database unavailable" in str(copy.headers["x-ltm-error"])
    assert await world.inbox(call.tool_call_id) is None


async def test_two_workers_racing_at_the_limit_never_pass_it_nor_save_a_text_twice(
    world: World, services: TestServices, settings: Settings, tmp_path: Path
) -> None:
    """Many creations of one server scope and one person's, published at once to two workers
    that batch them: each scope ends at its limit exactly, every text in it once."""
    server = await world.server()
    persona = await world.persona(server)
    owner_user_id, owner = await world.user()
    await world.member(server, owner, "olive", display_name="Olive")
    await world.server_memory(persona, "seeded")
    await world.personal_memory(owner_user_id, 0, "seeded")
    texts = [f"fact {n}" for n in range(20)]
    # Each text three times, as the LLM might write it again: same words, other case, spaces.
    variants = [text for text in texts for text in (text, text.upper(), f"  {text}  ")]
    calls = [
        create(persona, {"memory_content": text, "memory_scope": "server_wide"})
        for text in variants
    ] + [
        create(
            persona,
            {"memory_content": text, "memory_scope": "target_user", "target_user": "Olive"},
            tool_name=REMEMBER_THIS_FACT,
        )
        for text in variants
    ]
    async with own_topology(settings, "race", publisher_confirms=True) as (own, topology, channel):
        env = {"LTM_AMQP_PREFIX": own.amqp_prefix, "LTM_MAX_SERVER_MEMORIES": "12"}
        env["LTM_MAX_PERSONAL_MEMORIES"] = "9"
        async with tap_events(channel, topology.events_exchange, ["result.#"]) as tap:
            with (
                new_worker(services, tmp_path, "one", **env) as one,
                new_worker(services, tmp_path, "two", **env) as two,
            ):
                await asyncio.gather(one.wait_ready_async(), two.wait_ready_async())
                await asyncio.gather(*(publish_tool_call(channel, topology, c) for c in calls))
                await tap.wait_until(
                    lambda t: len(t.events(ToolCallCompleted)) >= len(calls),
                    timeout=60,
                    what="an answer to every call",
                )

                # A worker counts a call once its events are confirmed, a moment after the
                # result reaches the tap: both counts are waited for.
                async def both_answered() -> bool:
                    counts = (await one.calls_answered(), await two.calls_answered())
                    return min(counts) > 0 and sum(counts) >= len(calls)

                await eventually(both_answered, timeout=10, what="both workers' answer counts")
                assert max(await _largest_batch(one), await _largest_batch(two)) > 1

    server_memories = await _contents(
        world,
        "SELECT content FROM server_memories WHERE server_id = %s AND persona_lineage_id = %s",
        server.server_id,
        persona.lineage,
    )
    personal_memories = await _contents(
        world, "SELECT content FROM personal_memories WHERE user_id = %s", owner_user_id
    )
    for held, limit in ((server_memories, 12), (personal_memories, 9)):
        assert len(held) == limit
        assert len({" ".join(text.split()).casefold() for text in held}) == limit
    statuses = [event.status for event in tap.events(ToolCallCompleted)]
    assert len(statuses) == len(calls)
    assert statuses.count(MemoryStatus.SAVED) == (12 - 1) + (9 - 1)
    refused = {MemoryStatus.SAVE_DUPLICATE, MemoryStatus.SAVE_LIMIT_EXCEEDED}
    assert set(statuses) <= refused | {MemoryStatus.SAVED}
    created = await world.execute(
        "SELECT count(*) AS n FROM memory_revisions WHERE action = 'created'"
        " AND tool_call_id = ANY(%s)",
        [call.tool_call_id for call in calls],
    )
    assert created[0]["n"] == (12 - 1) + (9 - 1)


async def _largest_batch(worker: LtmProcess) -> float:
    """The largest bucket of `ltm_transaction_calls` that saw a transaction."""
    largest = 0.0
    for family in text_string_to_metric_families(await worker.metrics()):
        buckets = [s for s in family.samples if s.name == "ltm_transaction_calls_bucket"]
        previous = 0.0
        for sample in buckets:
            if sample.value > previous:
                bound = float(sample.labels["le"])
                largest = max(largest, bound)
            previous = sample.value
    return largest
