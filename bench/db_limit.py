"""The database limit: the worker's statements for one successful update, in a tight loop.

Per call, on one psycopg 3 async connection with prepared statements, exactly what the
worker sends: claim the inbox row and load the server state, the scoped update with its
revision, the finish statement (the outbox rows and the stored result), commit; then mark
the outbox rows published in a transaction of their own. Each client updates its own share
of the memories, so that clients do not wait on each other's row locks. With `batch` > 1,
that many calls share each transaction (the worker's statements take arrays), which is
what the worker does with calls that arrive together.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import DictRow, dict_row

from bench.samples import Sample
from bench.sql import (
    CLAIM,
    FINISH,
    MARK_PUBLISHED,
    WRITE,
    CallValues,
    OutboxValues,
    claim_params,
    finish_params,
    write_params,
)
from bench.world import Target, content_for
from contracts import UPDATE_LONG_TERM_MEMORY

__all__ = ["DbFigure", "as_dict", "measure"]

_ACTOR = "210987654321098765"
_CHANNEL = "410987654321098765"


@dataclass(frozen=True, slots=True)
class DbFigure:
    clients: int
    batch: int
    calls: int
    seconds: float
    tps: float
    failures: int


async def _one_transaction(
    connection: psycopg.AsyncConnection[DictRow],
    cursor: psycopg.AsyncCursor[DictRow],
    calls: Sequence[CallValues],
    sample: Sample,
) -> int:
    """One transaction's statements for `calls`, then the mark; how many found their memory."""
    await cursor.execute(CLAIM, claim_params(calls), prepare=True)
    states = {row["tool_call_id"]: row for row in await cursor.fetchall()}
    ordered = [states[call.tool_call_id] for call in calls]
    assert all(state["claimed"] and state["server_id"] is not None for state in ordered)
    await cursor.execute(
        WRITE,
        write_params(
            calls,
            server_ids=[state["server_id"] for state in ordered],
            lineages=[state["persona_lineage_id"] for state in ordered],
        ),
        prepare=True,
    )
    written = len(await cursor.fetchall())
    events = sample.events
    answered = [
        (
            call.tool_call_id,
            OutboxValues(
                event_ids=[uuid.uuid4() for _ in events],
                event_types=[event.event_type for event in events],
                routing_keys=[event.routing_key for event in events],
                bodies=[event.body for event in events],
                ttls=[event.ttl_ms for event in events],
                correlated=[event.correlated for event in events],
                status=sample.status,
                result=sample.result,
            ),
        )
        for call in calls
    ]
    await cursor.execute(FINISH, finish_params(answered), prepare=True)
    outbox_ids = [row["outbox_id"] for row in await cursor.fetchall()]
    await connection.commit()
    await cursor.execute(MARK_PUBLISHED, {"outbox_ids": outbox_ids}, prepare=True)
    await connection.commit()
    return written


def _call(target: Target, tool_call_id: str, number: int) -> CallValues:
    return CallValues(
        tool_call_id=tool_call_id,
        event_id=uuid.uuid4(),
        tool_name=UPDATE_LONG_TERM_MEMORY,
        guild_id=target.guild_id,
        channel_id=_CHANNEL,
        shard_id=0,
        server_disc_id=target.guild_id,
        persona_id=target.persona_id,
        memory_id=target.memory_id,
        content=content_for(number),
        actor=_ACTOR,
    )


async def _client(
    url: str,
    targets: Sequence[Target],
    sample: Sample,
    *,
    tag: str,
    seconds: float,
    batch: int,
    warmup: int,
    ready: asyncio.Barrier,
) -> tuple[int, int, float, float]:
    """(calls, failures, started, ended) of one client."""
    connection = await psycopg.AsyncConnection.connect(url, row_factory=dict_row)
    async with connection:
        cursor = connection.cursor()
        number = 0

        async def transaction() -> int:
            nonlocal number
            calls = []
            for _ in range(batch):
                calls.append(_call(targets[number % len(targets)], f"{tag}:{number}", number))
                number += 1
            return await _one_transaction(connection, cursor, calls, sample)

        for _ in range(warmup):
            await transaction()
        await ready.wait()
        started = time.perf_counter()
        deadline = started + seconds
        calls = failures = 0
        while time.perf_counter() < deadline:
            failures += batch - await transaction()
            calls += batch
        return calls, failures, started, time.perf_counter()


async def measure(
    url: str,
    targets: Sequence[Target],
    sample: Sample,
    *,
    clients: int,
    seconds: float,
    batch: int = 1,
    warmup: int = 20,
) -> DbFigure:
    """Calls per second with `clients` connections, each looping for `seconds`.

    `batch` calls share each transaction, as the worker's batches do under load.
    """
    if len(targets) < clients * batch:
        raise ValueError("fewer memories than clients x batch")
    ready = asyncio.Barrier(clients)
    outcomes = await asyncio.gather(
        *(
            _client(
                url,
                targets[k::clients],
                sample,
                tag=f"db{clients}x{batch}c{k}",
                seconds=seconds,
                batch=batch,
                warmup=warmup,
                ready=ready,
            )
            for k in range(clients)
        )
    )
    calls = sum(outcome[0] for outcome in outcomes)
    failures = sum(outcome[1] for outcome in outcomes)
    elapsed = max(outcome[3] for outcome in outcomes) - min(outcome[2] for outcome in outcomes)
    return DbFigure(
        clients=clients,
        batch=batch,
        calls=calls,
        seconds=elapsed,
        tps=calls / elapsed if elapsed > 0 else 0.0,
        failures=failures,
    )


def as_dict(figure: DbFigure) -> dict[str, Any]:
    return {
        "clients": figure.clients,
        "batch": figure.batch,
        "calls": figure.calls,
        "seconds": round(figure.seconds, 3),
        "tps": round(figure.tps, 1),
        "failures": figure.failures,
    }
