"""The `erasure` phase: the time the worker takes to erase a user with 100 personal memories
and 10,000 revisions, from the request's publish to its answer (docs/data-rights.md).

The user is seeded by SQL (each memory with 100 revisions, as a long history of updates
leaves them, and the tool-call records of those updates), then a worker of its own answers
one `data_request.requested`: the dead-letter pass, the transaction over every store, the
outbox rows and their publish.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Final

import aio_pika
import psycopg
from aio_pika.abc import AbstractConnection

from contracts import (
    DATA_REQUEST_ROUTING_KEY,
    DataRequestCompleted,
    DataRequestRequested,
    Topology,
    amqp_properties,
    decode_event,
    encode_event,
    result_routing_key,
)
from contracts.data_requests import RequestContext, RequestedBy, Subject

__all__ = [
    "ERASURE_KEY",
    "MEMORIES",
    "REVISIONS",
    "measure_erasure",
    "seed_subject",
    "timed_erasure",
]

ERASURE_KEY: Final = "erasure_100_memories_10k_revisions_s"
MEMORIES: Final = 100
REVISIONS: Final = 10_000
_SUBJECT: Final = "777000000000000001"
_SHARD: Final = 0


async def seed_subject(url: str, *, memories: int = MEMORIES, revisions: int = REVISIONS) -> str:
    """A user with `memories` personal memories, `revisions` revisions over them, and one
    tool-call record per revision, triggered by them; their Discord id."""
    per_memory = revisions // memories
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as connection:
        await connection.execute(
            "INSERT INTO users (user_disc_id, user_nickname) VALUES (%s, 'Erasable')", (_SUBJECT,)
        )
        await connection.execute(
            """
            WITH owner AS (SELECT user_id FROM users WHERE user_disc_id = %(subject)s)
            INSERT INTO personal_memories (user_id, persona_lineage_id, content)
            SELECT owner.user_id, 0, 'erasable memory ' || g
            FROM owner, generate_series(1, %(memories)s) AS g
            """,
            {"subject": _SUBJECT, "memories": memories},
        )
        await connection.execute(
            """
            WITH owned AS (
                SELECT m.personal_memory_id, m.user_id FROM personal_memories AS m
                JOIN users AS u ON u.user_id = m.user_id WHERE u.user_disc_id = %(subject)s
            )
            INSERT INTO memory_revisions (scope, memory_id, action, content_before,
                content_after, owner_user_id, persona_lineage_id, actor_disc_id, tool_call_id)
            SELECT 'target_user', o.personal_memory_id,
                   CASE WHEN r = 1 THEN 'created' ELSE 'updated' END,
                   CASE WHEN r = 1 THEN '' ELSE 'version ' || (r - 1) END, 'version ' || r,
                   o.user_id, 0, %(subject)s,
                   'bench-erasure-' || o.personal_memory_id || '-' || r
            FROM owned AS o, generate_series(1, %(per_memory)s) AS r
            """,
            {"subject": _SUBJECT, "per_memory": per_memory},
        )
        await connection.execute(
            """
            INSERT INTO tool_call_inbox (tool_call_id, event_id, tool_name, channel_id,
                shard_id, status, result, fingerprint, triggerer_id, completed_at)
            SELECT tool_call_id, gen_random_uuid(), 'update_long_term_memory', '1', 0,
                   'memory_updated_successfully',
                   jsonb_build_object('status', 'memory_updated_successfully',
                                      'message', content_after,
                                      'data', jsonb_build_object('memory_id', memory_id)),
                   'fingerprint', %(subject)s, now()
            FROM memory_revisions WHERE tool_call_id LIKE 'bench-erasure-%%'
            """,
            {"subject": _SUBJECT},
        )
    return _SUBJECT


async def measure_erasure(
    connection: AbstractConnection, topology: Topology, subject: str, *, timeout: float = 120.0
) -> DataRequestCompleted:
    """Publishes the erasure and returns its answer; the seconds are the caller's."""
    request = DataRequestRequested(
        request_id=f"bench-erasure-{uuid.uuid4()}",
        kind="erase",
        subject=Subject(user_id=subject),
        requested_by=RequestedBy(kind="user", id=subject),
        context=RequestContext(shard_id=_SHARD, channel_id="1"),
    )
    channel = await connection.channel(publisher_confirms=True)
    try:
        replies = await channel.declare_queue(exclusive=True, auto_delete=True)
        events = await channel.get_exchange(topology.events_exchange, ensure=False)
        await replies.bind(events, routing_key=result_routing_key(_SHARD))
        answered: asyncio.Future[DataRequestCompleted] = asyncio.get_running_loop().create_future()

        async def on_reply(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            async with message.process():
                if message.correlation_id == request.request_id and not answered.done():
                    event = decode_event(message.body)
                    if isinstance(event, DataRequestCompleted):
                        answered.set_result(event)

        await replies.consume(on_reply)
        requests = await channel.get_exchange(topology.tool_calls_exchange, ensure=False)
        await requests.publish(
            aio_pika.Message(encode_event(request), **amqp_properties(request)),
            routing_key=DATA_REQUEST_ROUTING_KEY,
        )
        return await asyncio.wait_for(answered, timeout)
    finally:
        await channel.close()


async def timed_erasure(
    connection: AbstractConnection, topology: Topology, subject: str
) -> tuple[float, DataRequestCompleted]:
    """The seconds from the request's publish to its answer, and the answer."""
    started = time.perf_counter()
    answer = await measure_erasure(connection, topology, subject)
    return time.perf_counter() - started, answer
