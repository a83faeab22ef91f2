"""The peer: the consumer a user would write with FastStream instead of running the worker.

`python -m bench.peer` (settings from `BENCH_PEER_*` variables, set by `bench.run`).

Written the way FastStream's documentation shows it: a `RabbitBroker`, the queue and
exchanges as `RabbitQueue` / `RabbitExchange` (declared exactly as the worker declares them),
one `@broker.subscriber` handler, one `broker.publisher` for the events, FastStream's
default acknowledgement (ack after the handler returns). The handler does the worker's
work for a successful update: the same transaction with the same SQL, its parameters made
by the worker's own builders, on a psycopg pool (claim, scoped update with revision, finish
with 4 outbox rows, commit), the same 4 events published with confirms (concurrently), then
the outbox rows marked published.

Contract models are strict, so the handler's body is decoded by the contract's own decoder
(FastStream's `decoder=` hook) rather than FastStream's dict-then-validate path.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any, Final

from faststream import FastStream
from faststream.rabbit import (
    Channel,
    ExchangeType,
    QueueType,
    RabbitBroker,
    RabbitExchange,
    RabbitQueue,
)
from faststream.rabbit.message import RabbitMessage
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from bench.sql import APPLY, CLAIM, FINISH, MARK_PUBLISHED, finish_params, server_update
from contracts import (
    UPDATE_COLOR,
    UPDATE_LONG_TERM_MEMORY,
    CacheInvalidate,
    EmbedField,
    EmbedPayload,
    EmbedRequested,
    Event,
    MemoryStatus,
    MemoryUpdated,
    ResultData,
    ToolCallCompleted,
    ToolCallRequested,
    Topology,
    audit_routing_key,
    cache_routing_key,
    decode_tool_call,
    embed_routing_key,
    encode_event,
    result_routing_key,
    worker_queue_arguments,
)
from infra.storage.engine import session_options
from worker.adapters.inbox import claim_params
from worker.adapters.memory_writes import apply_params
from worker.core.outgoing import OutgoingEvent

__all__ = ["app", "broker", "main"]

AMQP_URL: Final = os.environ.get("BENCH_PEER_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
DATABASE_URL: Final = os.environ.get("BENCH_PEER_DATABASE_URL", "postgresql://localhost/ltm")
PREFIX: Final = os.environ.get("BENCH_PEER_PREFIX", "ltm")
PREFETCH: Final = int(os.environ.get("BENCH_PEER_PREFETCH", "64"))
POOL_SIZE: Final = int(os.environ.get("BENCH_PEER_POOL_SIZE", "8"))
READY_FILE: Final = os.environ.get("BENCH_PEER_READY_FILE")
REPLY_TTL_MS: Final = 900_000

topology = Topology(PREFIX)
pool = AsyncConnectionPool(
    DATABASE_URL,
    min_size=POOL_SIZE,
    max_size=POOL_SIZE,
    open=False,
    # The worker's session settings, as it runs the same statements.
    kwargs={"row_factory": dict_row, "options": session_options(DATABASE_URL)},
)
broker = RabbitBroker(AMQP_URL, default_channel=Channel(prefetch_count=PREFETCH))

tool_calls = RabbitExchange(topology.tool_calls_exchange, type=ExchangeType.TOPIC, durable=True)
events = RabbitExchange(topology.events_exchange, type=ExchangeType.TOPIC, durable=True)
worker_queue = RabbitQueue(
    topology.worker_queue,
    queue_type=QueueType.QUORUM,
    arguments={
        "x-dead-letter-exchange": topology.dead_letter_exchange,
        "x-dead-letter-strategy": "at-least-once",
        "x-overflow": "reject-publish",
        "x-delivery-limit": 5,
    },
    routing_key=UPDATE_LONG_TERM_MEMORY,
)
# A mismatch would close the channel at declaration: fail here, saying why, instead.
if worker_queue.arguments != worker_queue_arguments(topology):
    raise RuntimeError(f"the peer's queue arguments differ from the worker's: {worker_queue}")
publisher = broker.publisher(exchange=events, persist=True, mandatory=False)


async def _open_pool() -> None:
    await pool.open(wait=True)


async def _ready() -> None:
    if READY_FILE:
        await asyncio.to_thread(Path(READY_FILE).touch)


async def _close_pool() -> None:
    await pool.close()


app = FastStream(broker, on_startup=[_open_pool], after_startup=[_ready], on_shutdown=[_close_pool])


def decode(message: RabbitMessage) -> ToolCallRequested:
    return decode_tool_call(message.body)


async def _publish(event: Event, body: bytes, routing_key: str, ttl_ms: int | None) -> None:
    await publisher.publish(
        body,
        routing_key=routing_key,
        content_type="application/json",
        message_id=str(event.event_id),
        correlation_id=event.correlation_id,
        message_type=event.event_type,
        timestamp=event.occurred_at,
        headers={"schema_version": event.schema_version},
        expiration=None if ttl_ms is None else ttl_ms / 1000,
    )


@broker.subscriber(worker_queue, tool_calls, decoder=decode)
async def update_memory(call: ToolCallRequested) -> None:
    arguments: dict[str, Any] = call.arguments_object() or {}
    memory_id = int(arguments["memory_id"])
    content = str(arguments["memory_content"]).strip()
    async with pool.connection() as connection, connection.transaction():
        cursor = connection.cursor()
        await cursor.execute(CLAIM, claim_params([call]))
        state: dict[str, Any] | None = await cursor.fetchone()  # type: ignore[assignment]
        assert state is not None and state["claimed"], "a call is answered once"
        write = server_update(call, state, memory_id=memory_id, content=content)
        await cursor.execute(APPLY, apply_params([write], [0]))
        written: dict[str, Any] | None = await cursor.fetchone()  # type: ignore[assignment]
        assert written is not None, "the bench only updates memories that exist"
        outgoing = _events(call, state, written, memory_id, content)
        bodies = [encode_event(item.event) for item in outgoing]
        result = outgoing[0].event
        assert isinstance(result, ToolCallCompleted)
        await cursor.execute(FINISH, finish_params([result], outgoing, bodies))
    await asyncio.gather(
        *(
            _publish(item.event, body, item.routing_key, item.ttl_ms)
            for item, body in zip(outgoing, bodies, strict=True)
        )
    )
    async with pool.connection() as connection:
        await connection.execute(
            MARK_PUBLISHED, {"event_ids": [item.event.event_id for item in outgoing]}
        )


def _events(
    call: ToolCallRequested,
    state: dict[str, Any],
    written: dict[str, Any],
    memory_id: int,
    content: str,
) -> list[OutgoingEvent]:
    """The result, the embed, the cache invalidation and the audit event of one update."""
    context = call.context
    common: dict[str, Any] = {"causation_id": call.event_id, "tool_call_id": call.tool_call_id}
    where: dict[str, Any] = {
        "guild_id": context.guild_id,
        "channel_id": context.channel_id,
    }
    result = ToolCallCompleted(
        **common,
        **where,
        shard_id=context.shard_id,
        tool_name=call.tool_name,
        success=True,
        status=MemoryStatus.UPDATED,
        message=f"Server memory {memory_id} updated. Its new content is saved and in use.",
        data=ResultData(scope="server_wide", memory_id=memory_id, content_saved=content),
    )
    embed = EmbedRequested(
        **common,
        **where,
        shard_id=context.shard_id,
        kind="memory_updated",
        embed=EmbedPayload(
            title=f"{state['nickname']} updated a memory",
            description=f"```\n{content}\n```",
            color=UPDATE_COLOR,
            footer=f"ID:{memory_id} · Manage server memories with /memory server",
            fields=(EmbedField(name="Before", value=f"```\n{written['content_before']}\n```"),),
        ),
    )
    invalidation = CacheInvalidate(**common, cache="persona_state", key=context.server_disc_id)
    audit = MemoryUpdated(
        **common,
        **where,
        revision_id=written["revision_id"],
        scope="server_wide",
        memory_id=memory_id,
        owner_id=None,
        actor_id=context.triggerer_id,
        persona_id=context.persona_id,
        persona_lineage_id=written["persona_lineage_id"],
    )
    return [
        OutgoingEvent(result, result_routing_key(context.shard_id), REPLY_TTL_MS),
        OutgoingEvent(embed, embed_routing_key(context.shard_id), REPLY_TTL_MS),
        OutgoingEvent(invalidation, cache_routing_key("persona_state", context.server_disc_id)),
        OutgoingEvent(audit, audit_routing_key("updated", "server_wide")),
    ]


def main() -> int:
    import uvloop  # what `faststream run` uses when it is installed

    uvloop.run(app.run())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
