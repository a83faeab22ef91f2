"""Fixtures of the gateway tests: a fake Discord, a broker channel to publish and inspect with,
and gateways started against both, each on shards of its own so that tests do not interfere."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import aio_pika
import pytest
from aio_pika.abc import AbstractChannel, AbstractRobustConnection

from contracts import (
    EmbedField,
    EmbedPayload,
    EmbedRequested,
    Event,
    MemoryStatus,
    ResultData,
    ToolCallCompleted,
    Topology,
    amqp_properties,
    embed_routing_key,
    encode_event,
    result_routing_key,
)
from gateway import Gateway, RetryPolicy
from harness.broker import publish_raw
from harness.fake_discord import FakeDiscord
from harness.gateway import FAST_RETRIES, running_gateway
from harness.snowflake import snowflake
from harness.waiting import eventually
from infra.settings import Settings

# Shards 0 and 1 belong to the two-instance test; every other test takes fresh ones, from a
# range no other package's tests route to: the worker's tests answer calls of shard 2, and a
# worker's sweep publishes those answers into the queue of a gateway test's shard 2.
_shards = itertools.count(50_000)
SHARD_COUNT = 100_000


def fresh_shard() -> int:
    return next(_shards)


@pytest.fixture(scope="session")
async def fake_discord() -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord() as fake:
        yield fake


@pytest.fixture(scope="session")
def topology(settings: Settings) -> Topology:
    return Topology(settings.amqp_prefix)


@pytest.fixture(scope="session")
async def amqp(settings: Settings) -> AsyncIterator[AbstractRobustConnection]:
    connection = await aio_pika.connect_robust(settings.amqp_url)
    yield connection
    await connection.close()


@pytest.fixture
async def channel(amqp: AbstractRobustConnection) -> AsyncIterator[AbstractChannel]:
    opened = await amqp.channel()
    yield opened
    await opened.close()


GatewayFactory = Callable[..., AbstractAsyncContextManager[Gateway]]


@pytest.fixture
def start_gateway(settings: Settings, fake_discord: FakeDiscord) -> GatewayFactory:
    """`async with start_gateway(shards=(n,)) as gateway:` a gateway sending to the fake."""

    @asynccontextmanager
    async def start(
        *,
        shards: tuple[int, ...],
        shard_count: int = SHARD_COUNT,
        token: str = "fake-token-main",
        policy: RetryPolicy = FAST_RETRIES,
        stop_grace_s: float = 5.0,
        **options: Any,
    ) -> AsyncIterator[Gateway]:
        async with running_gateway(
            settings,
            fake_discord,
            shards=shards,
            shard_count=shard_count,
            token=token,
            policy=policy,
            stop_grace_s=stop_grace_s,
            **options,
        ) as gateway:
            yield gateway

    return start


async def publish(
    channel: AbstractChannel,
    topology: Topology,
    event: Event,
    routing_key: str,
    *,
    expiration_s: int | None = 900,
) -> None:
    """As the worker does: persistent, the contract's properties, and an expiration."""
    await publish_raw(
        channel,
        topology.events_exchange,
        encode_event(event),
        routing_key,
        **amqp_properties(event),
        expiration=expiration_s,
    )


async def publish_embed(
    channel: AbstractChannel, topology: Topology, event: EmbedRequested
) -> None:
    await publish(channel, topology, event, embed_routing_key(event.shard_id))


async def publish_result(
    channel: AbstractChannel, topology: Topology, event: ToolCallCompleted
) -> None:
    await publish(channel, topology, event, result_routing_key(event.shard_id))


def embed_requested(shard_id: int, channel_id: int | None = None, **embed: Any) -> EmbedRequested:
    payload: dict[str, Any] = {
        "title": "Tomori remembered something",
        "description": "```\nAlice likes tea\n```",
        "color": 0x25D4DA,
        "footer": "Manage server memories with /memory server",
        "fields": (EmbedField(name="Before", value="Alice likes coffee", inline=False),),
    }
    payload.update(embed)
    return EmbedRequested(
        tool_call_id=f"call_{snowflake()}",
        guild_id=snowflake(),
        channel_id=str(channel_id or snowflake()),
        shard_id=shard_id,
        kind="memory_updated",
        embed=EmbedPayload(**payload),
    )


def tool_call_completed(
    tool_call_id: str, shard_id: int, channel_id: str | None = None
) -> ToolCallCompleted:
    return ToolCallCompleted(
        tool_call_id=tool_call_id,
        tool_name="update_long_term_memory",
        guild_id=snowflake(),
        channel_id=channel_id or snowflake(),
        shard_id=shard_id,
        success=True,
        status=MemoryStatus.UPDATED,
        message="Saved: Alice likes tea.",
        data=ResultData(scope="server_wide", memory_id=42, content_saved="Alice likes tea"),
    )


async def until(condition: Callable[[], bool], *, what: str, timeout: float = 15.0) -> None:
    """Waits (with a deadline) until `condition()` holds."""

    async def probe() -> bool:
        return condition()

    await eventually(probe, timeout=timeout, what=what)


async def handled(
    gateway: Gateway, event: EmbedRequested | ToolCallCompleted, *, what: str = "embed handled"
) -> None:
    """Until the gateway has handled `event` to completion (it is among the ids it has seen)."""
    await until(lambda: event.event_id in gateway.shard_consumer.seen, what=what)
