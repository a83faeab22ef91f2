"""LTM_TRUSTED_PUBLISHERS: a call whose `user_id` is missing or not listed is dead-lettered,
`untrusted publisher`, and nothing is written or answered; unset, every call is taken and the
worker says so once at start."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aio_pika.abc import AbstractChannel

from contracts import ToolCallCompleted, Topology, amqp_properties, encode_event
from harness.broker import own_topology, publish_raw, tap_events
from harness.processes import LtmProcess
from harness.services import TestServices
from harness.snowflake import snowflake
from harness.world import World, tool_call
from infra.settings import Settings
from tests.e2e.conftest import new_worker

TRUSTED = "ltm-bot-of-the-test"


@pytest.fixture(scope="module")
async def guarded(
    settings: Settings, services: TestServices, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[Settings, Topology, AbstractChannel, LtmProcess]]:
    """A worker that trusts one user, which the test's own (guest) is not."""
    async with own_topology(settings, "trust", publisher_confirms=True) as (own, topology, ch):
        with new_worker(
            services,
            tmp_path_factory.mktemp("trust"),
            "guarded",
            LTM_AMQP_PREFIX=own.amqp_prefix,
            LTM_TRUSTED_PUBLISHERS=f"{TRUSTED}, ltm-operator-of-the-test",
        ) as worker:
            await worker.wait_ready_async()
            yield own, topology, ch, worker


def _log_lines(worker: LtmProcess, text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in worker.output().splitlines() if text in line]


async def _publish(channel: AbstractChannel, topology: Topology, call: Any, **extra: Any) -> None:
    await publish_raw(
        channel,
        topology.tool_calls_exchange,
        encode_event(call),
        call.tool_name,
        **{**amqp_properties(call), **extra},
    )


@pytest.mark.parametrize("user_id", [None, "guest"], ids=["no user_id", "a user not listed"])
async def test_an_untrusted_call_is_dead_lettered_and_nothing_is_written_or_answered(
    guarded: tuple[Settings, Topology, AbstractChannel, LtmProcess],
    world: World,
    user_id: str | None,
) -> None:
    _, topology, channel, _ = guarded
    persona = await world.persona(await world.server())
    memory_id = await world.server_memory(persona, "likes tea")
    call = tool_call(
        persona,
        {"memory_id": memory_id, "memory_content": "likes coffee"},
        triggerer_id=snowflake(),
    )
    async with (
        tap_events(channel, topology.dead_letter_exchange) as dead,
        tap_events(channel, topology.events_exchange) as events,
    ):
        await _publish(channel, topology, call, user_id=user_id)
        # Given up on before anything else: no transaction, no result.
        [copy] = await dead.wait_for_delivery(message_id=str(call.event_id))
    reason = str(copy.headers["x-ltm-error"])
    who = "no user_id" if user_id is None else "user_id 'guest'"
    assert reason == f"untrusted publisher: {who} is not in LTM_TRUSTED_PUBLISHERS"
    assert copy.body == encode_event(call)
    assert copy.headers.get("x-ltm-original-user-id") == user_id
    assert events.deliveries_with(correlation_id=call.tool_call_id) == []
    assert await world.inbox(call.tool_call_id) is None
    assert await world.content(memory_id) == "likes tea"


def test_the_worker_says_whom_it_trusts_at_start(
    guarded: tuple[Settings, Topology, AbstractChannel, LtmProcess],
) -> None:
    _, _, _, worker = guarded
    [line] = _log_lines(worker, "worker.trusted_publishers")
    assert line["users"] == sorted([TRUSTED, "ltm-operator-of-the-test"])
    assert _log_lines(worker, "worker.every_publisher_trusted") == []


@pytest.mark.usefixtures("worker_process")
async def test_unset_every_publisher_is_taken_and_the_worker_says_so_once(
    worker_process: LtmProcess, channel: AbstractChannel, topology: Topology, world: World
) -> None:
    persona = await world.persona(await world.server())
    call = tool_call(persona, {"memory_id": 1}, triggerer_id=snowflake())
    async with tap_events(channel, topology.events_exchange, ["result.#"]) as tap:
        await _publish(channel, topology, call)  # no user_id at all
        await tap.wait_for(ToolCallCompleted, tool_call_id=call.tool_call_id)
    assert len(_log_lines(worker_process, "worker.every_publisher_trusted")) == 1
