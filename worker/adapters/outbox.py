"""The outbox: events written in a change's transaction, published after its commit.

Rows are published with confirms right after the commit, marked published, and swept up by
any worker when a crash or a lost broker left them behind. A row keeps the trace context of
the call that made it (`traceparent`, while tracing is on), so that its publish, however late
and by whichever worker, belongs to that call's trace.

`PostgresOutboxMarks` is the outbox as a batch's transaction marks it
(`worker.ports.OutboxMarks`); `OutboxStore`, on its own transactions, is the relay's
(`worker.runtime.ports.Outbox`).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final

import orjson
import psycopg
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from contracts import encode_event
from infra.storage.engine import psycopg_sql
from worker.core.outgoing import (
    UNTRACED,
    OutboxRow,
    OutgoingEvent,
    Traceparents,
    outbox_rows,
    traceparent_of,
)

__all__ = [
    "MARK_PUBLISHED",
    "OUTBOX_INSERT",
    "LockedRows",
    "OutboxStore",
    "PostgresOutboxMarks",
    "events_params",
    "queue_events",
]


# The head of an insert of queued events: public for a statement that queues them in a CTE of
# its own (the batch's last statement, `worker.adapters.inbox.FINISH`).
OUTBOX_INSERT: Final = """
    INSERT INTO outbox
        (event_id, event_type, routing_key, correlation_id, body, ttl_ms, traceparent)
    SELECT event_id, event_type, routing_key, correlation_id, convert_to(body, 'UTF8'), ttl_ms,
           traceparent
    FROM json_to_recordset(CAST(:events AS json)) AS e(
        event_id uuid, event_type text, routing_key text, correlation_id text, body text,
        ttl_ms integer, traceparent text
    )
"""

_QUEUE: Final = text(OUTBOX_INSERT)


def events_params(
    events: Sequence[OutgoingEvent],
    bodies: Sequence[bytes],
    traceparents: Traceparents = UNTRACED,
) -> dict[str, str]:
    return {
        "events": orjson.dumps(
            [
                {
                    "event_id": str(outgoing.event.event_id),
                    "event_type": outgoing.event.event_type,
                    "routing_key": outgoing.routing_key,
                    "correlation_id": outgoing.event.correlation_id,
                    "body": body.decode(),
                    "ttl_ms": outgoing.ttl_ms,
                    "traceparent": traceparent_of(traceparents, outgoing.event),
                }
                for outgoing, body in zip(events, bodies, strict=True)
            ]
        ).decode()
    }


async def queue_events(
    connection: AsyncConnection, events: Sequence[OutgoingEvent]
) -> list[OutboxRow]:
    """Queues events in the outbox inside the caller's transaction."""
    bodies = [encode_event(outgoing.event) for outgoing in events]
    await connection.execute(_QUEUE, events_params(events, bodies))
    return outbox_rows(events, bodies)


_UNPUBLISHED: Final = text(
    """
    SELECT event_id, event_type, routing_key, correlation_id, body, traceparent,
           CASE WHEN ttl_ms IS NULL THEN NULL
                ELSE ttl_ms - (extract(epoch FROM now() - created_at) * 1000)::integer
           END AS ttl_ms
    FROM outbox
    WHERE published_at IS NULL AND created_at < now() - make_interval(secs => :min_age_s)
    ORDER BY outbox_id
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
    """
)

# Public: the bench runs it as the batch's transaction does.
MARK_PUBLISHED: Final = "UPDATE outbox SET published_at = now() WHERE event_id = ANY(:event_ids)"
_MARK_PUBLISHED: Final = text(MARK_PUBLISHED)
_MARK_PUBLISHED_PSYCOPG: Final = psycopg_sql(MARK_PUBLISHED)

_PURGE_PUBLISHED: Final = text(
    """
    DELETE FROM outbox
    WHERE published_at IS NOT NULL AND published_at < now() - make_interval(secs => :age_s)
    """
)

_BACKLOG: Final = text("SELECT count(*) FROM outbox WHERE published_at IS NULL")


class PostgresOutboxMarks:
    """Earlier calls' rows, confirmed by the broker since, marked on a batch's cursor."""

    __slots__ = ("_cursor",)

    def __init__(self, cursor: psycopg.AsyncCursor[Any]) -> None:
        self._cursor = cursor

    async def mark_published(self, event_ids: Sequence[uuid.UUID]) -> None:
        """Marked in this commit."""
        if event_ids:
            await self._cursor.execute(_MARK_PUBLISHED_PSYCOPG, {"event_ids": list(event_ids)})


@dataclass(frozen=True, slots=True)
class LockedRows:
    """Rows left unpublished, locked in their transaction until they are marked."""

    rows: list[OutboxRow]
    connection: AsyncConnection

    async def mark_published(self) -> None:
        """Every row of the batch, published or expired, in its transaction."""
        await _mark_published_in(self.connection, [row.event_id for row in self.rows])


class OutboxStore:
    """The outbox's rows: marked published after the broker's confirm, swept after a crash."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def mark_published(self, event_ids: Sequence[uuid.UUID]) -> None:
        if event_ids:
            async with self.engine.begin() as connection:
                await _mark_published_in(connection, event_ids)

    @asynccontextmanager
    async def unpublished(self, *, limit: int, min_age_s: float) -> AsyncIterator[LockedRows]:
        """Locks a batch of rows left unpublished; the caller publishes, then marks them.

        Rows younger than `min_age_s` belong to a worker that is publishing them right now.
        SKIP LOCKED lets several workers sweep at once without publishing a row twice.
        `ttl_ms` is what is left of the row's time to live (<= 0: expired).
        """
        async with self.engine.begin() as connection:
            result = await connection.execute(
                _UNPUBLISHED, {"limit": limit, "min_age_s": min_age_s}
            )
            rows = [
                OutboxRow(
                    event_id=row.event_id,
                    event_type=row.event_type,
                    routing_key=row.routing_key,
                    correlation_id=row.correlation_id,
                    body=bytes(row.body),
                    ttl_ms=row.ttl_ms,
                    traceparent=row.traceparent,
                )
                for row in result
            ]
            yield LockedRows(rows, connection)

    async def purge_published(self, *, age_s: float) -> int:
        async with self.engine.begin() as connection:
            result = await connection.execute(_PURGE_PUBLISHED, {"age_s": age_s})
            return int(result.rowcount or 0)

    async def backlog(self) -> int:
        async with self.engine.connect() as connection:
            return int((await connection.execute(_BACKLOG)).scalar_one())


async def _mark_published_in(connection: AsyncConnection, event_ids: Sequence[uuid.UUID]) -> None:
    if event_ids:
        await connection.execute(_MARK_PUBLISHED, {"event_ids": list(event_ids)})
