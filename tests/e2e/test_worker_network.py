"""The worker behind a faulty network path to RabbitMQ (a proxy of the test's own)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from aio_pika.abc import AbstractChannel

from contracts import (
    CacheInvalidate,
    ToolCallCompleted,
    Topology,
    cache_routing_key,
    encode_event,
    result_routing_key,
)
from harness.amqp_proxy import BASIC_QOS, AmqpProxy
from harness.broker import publish_tool_call, tap_events
from harness.processes import LtmProcess
from harness.services import TestServices
from harness.snowflake import snowflake
from harness.waiting import eventually
from harness.world import World, tool_call
from tests.e2e.conftest import new_worker

_HEARTBEAT_S = 1  # a stalled connection is given up after 6 s


@asynccontextmanager
async def _proxied_worker(
    services: TestServices, tmp_path: Path, proxy: AmqpProxy, **env: str
) -> AsyncIterator[LtmProcess]:
    url = proxy.url(heartbeat_s=_HEARTBEAT_S)
    with new_worker(services, tmp_path, "proxied", LTM_AMQP_URL=url, **env) as worker:
        yield worker


@pytest.mark.parametrize("fault", ["cut", "stall"])
async def test_a_connection_lost_while_the_worker_sets_up_is_opened_again(
    channel: AbstractChannel,
    topology: Topology,
    world: World,
    services: TestServices,
    tmp_path: Path,
    fault: str,
) -> None:
    persona = await world.persona(await world.server())
    memory_id = await world.server_memory(persona, "before")
    call = tool_call(
        persona, {"memory_id": memory_id, "memory_content": "after"}, triggerer_id=snowflake()
    )
    async with AmqpProxy(services.amqp_url) as proxy:
        # The first connection ends between declaring the topology and consuming: closed, or
        # given up by the worker's heartbeat check.
        if fault == "cut":
            proxy.cut_at(BASIC_QOS)
        else:
            proxy.stall_at(BASIC_QOS)
        async with _proxied_worker(services, tmp_path, proxy) as worker:
            await eventually(
                lambda: worker.logged("worker.broker_connection_failed"),
                timeout=30,
                what="the worker giving up on its first connection",
            )
            proxy.resume()
            await worker.wait_ready_async(timeout=30)
            assert proxy.faults == 1 and proxy.connections >= 2
            async with tap_events(channel, topology.events_exchange) as tap:
                await publish_tool_call(channel, topology, call)
                await tap.wait_for(ToolCallCompleted, tool_call_id=call.tool_call_id)
    assert await world.content(memory_id) == "after"


@pytest.mark.parametrize("stalls_at", ["publish", "shard queue"])
async def test_the_outbox_sweep_outlives_a_stalled_broker_connection(
    channel: AbstractChannel,
    topology: Topology,
    world: World,
    services: TestServices,
    tmp_path: Path,
    stalls_at: str,
) -> None:
    """aiormq drops a stalled connection by failing its pending confirms and RPCs with
    CancelledError; the sweep then must take it as a lost connection, not as its own end:
    whether it was publishing, or declaring the queue of a shard its rows go to first."""
    async with (
        AmqpProxy(services.amqp_url) as proxy,
        tap_events(channel, topology.events_exchange) as tap,
        _proxied_worker(services, tmp_path, proxy, LTM_OUTBOX_SWEEP_INTERVAL_S="0.1") as worker,
    ):
        await worker.wait_ready_async()
        proxy.stall()
        # Left behind by a crash: the sweep meets the stalled path with it.
        shard = _UNSEEN_SHARD if stalls_at == "shard queue" else None
        stuck = await _unpublished_row(world, age_s=60, shard=shard)
        await eventually(
            lambda: worker.logged("worker.broker_connection_lost"),
            timeout=30,
            what="the worker giving up on the stalled connection",
        )
        assert tap.deliveries_with(message_id=stuck) == []
        proxy.resume()
        await worker.wait_ready_async(timeout=30)
        await tap.wait_for_delivery(message_id=stuck, timeout=30)
        # And the sweep goes on for rows left later.
        later = await _unpublished_row(world, age_s=60)
        await tap.wait_for_delivery(message_id=later, timeout=30)


# A shard no call of the run answers: its queue is declared first by the sweep.
_UNSEEN_SHARD = 977


async def _unpublished_row(world: World, *, age_s: float, shard: int | None = None) -> str:
    """An outbox row as a worker killed between commit and publish leaves it: a cache
    invalidation, or with `shard` one routed to that shard's queue."""
    event = CacheInvalidate(cache="user", key=snowflake())
    routing_key = (
        cache_routing_key(event.cache, str(event.key))
        if shard is None
        else result_routing_key(shard)
    )
    await world.execute(
        "INSERT INTO outbox (event_id, event_type, routing_key, body, created_at)"
        " VALUES (%s, %s, %s, %s, now() - make_interval(secs => %s))",
        event.event_id,
        event.event_type,
        routing_key,
        encode_event(event),
        age_s,
    )
    return str(event.event_id)
