"""The database limit: the worker's statements for one successful update, in a tight loop.

Per call, on one psycopg 3 async connection with prepared statements, exactly what the
worker sends, with the parameters its own builders make, in the worker's own pipelined
transaction: the mark of the previous transaction's outbox rows (confirmed by the broker
meanwhile, as a busy worker marks them in its next commit) with the claim of the inbox row
and the server state; the scoped update with its revision; the finish statement (the outbox
rows and the stored result) with the commit. Each client updates its own share of the
memories, so that clients do not wait on each other's row locks. With `batch` > 1, that many
calls share each transaction (each statement takes the whole batch), which is what the worker
does with calls that arrive together. The broker loop's committing mode commits each call it
consumes through the same `CommittingConnection`.

The events queued are the sample's (what the running worker emitted for one call), each
with a fresh id and the call's ids, and their captured bodies: the outbox stores what the
worker's output really weighs, without this loop re-encoding them. The stored result is the
worker's own (`success`) for the write the database performed.
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
    APPLY,
    CLAIM,
    FINISH,
    MARK_PUBLISHED,
    apply_batches,
    finish_params,
    server_update,
)
from bench.world import Target, content_for, tool_call
from contracts import Event, ToolCallCompleted, ToolCallRequested, decode_event
from infra.storage.engine import session_options
from worker.adapters.inbox import claim_params
from worker.adapters.memory_store import pipelined_transaction
from worker.core.model import WrittenMemory
from worker.core.outgoing import OutgoingEvent
from worker.core.records import PlannedWrite
from worker.core.update import result_of_update
from worker.tools.base import result_for

__all__ = ["CommittingConnection", "DbFigure", "as_dict", "measure"]


@dataclass(frozen=True, slots=True)
class DbFigure:
    clients: int
    batch: int
    calls: int
    seconds: float
    tps: float
    failures: int


@dataclass(frozen=True, slots=True)
class _Outgoing:
    """The sample's events, decoded once, with where they went and their captured bodies."""

    events: tuple[OutgoingEvent, ...]
    bodies: tuple[bytes, ...]

    @classmethod
    def of(cls, sample: Sample) -> _Outgoing:
        return cls(
            events=tuple(
                OutgoingEvent(decode_event(event.body), event.routing_key, event.ttl_ms)
                for event in sample.events
            ),
            bodies=tuple(event.body for event in sample.events),
        )

    def for_call(self, call: ToolCallRequested) -> list[OutgoingEvent]:
        """The events as the worker makes them for `call`: new ids, caused by the call."""
        return [
            OutgoingEvent(_reissued(outgoing.event, call), outgoing.routing_key, outgoing.ttl_ms)
            for outgoing in self.events
        ]


def _reissued(event: Event, call: ToolCallRequested) -> Event:
    update: dict[str, Any] = {"event_id": uuid.uuid4(), "causation_id": call.event_id}
    if event.correlation_id is not None:
        update["tool_call_id"] = call.tool_call_id
    return event.model_copy(update=update)


class CommittingConnection:
    """One connection committing the worker's transactions (`commit`), each marking the
    outbox rows the previous one queued, as a busy worker marks them in its next commit."""

    def __init__(self, connection: psycopg.AsyncConnection[DictRow], sample: Sample) -> None:
        self._connection = connection
        self._cursor = connection.cursor()
        self._outgoing = _Outgoing.of(sample)
        self._published: list[uuid.UUID] = []

    @classmethod
    async def connect(cls, url: str, sample: Sample) -> CommittingConnection:
        """Connected with the worker's session settings, as its engine connects."""
        connection = await psycopg.AsyncConnection.connect(
            url, row_factory=dict_row, autocommit=True, options=session_options(url)
        )
        return cls(connection, sample)

    async def close(self) -> None:
        await self._connection.close()

    async def commit(self, calls: Sequence[tuple[ToolCallRequested, int, str]]) -> int:
        """One transaction's statements for (call, memory id, content) triples, in the
        worker's own pipelined transaction (three round trips); how many found their memory."""
        cursor, outgoing = self._cursor, self._outgoing
        requests = [call for call, _, _ in calls]
        async with pipelined_transaction(self._connection):
            if self._published:
                await cursor.execute(MARK_PUBLISHED, {"event_ids": self._published}, prepare=True)
            await cursor.execute(CLAIM, claim_params(requests), prepare=True)
            states = {row["tool_call_id"]: row for row in await cursor.fetchall()}
            writes: list[PlannedWrite] = []
            for call, memory_id, content in calls:
                state = states[call.tool_call_id]
                assert state["claimed"] and state["server_id"] is not None, state
                writes.append(server_update(call, state, memory_id=memory_id, content=content))
            written: dict[str, WrittenMemory] = {}
            for params in apply_batches(writes):
                await cursor.execute(APPLY, params, prepare=True)
                for row in await cursor.fetchall():
                    written[row["tool_call_id"]] = WrittenMemory(
                        revision_id=row["revision_id"],
                        content_before=row["content_before"],
                        persona_lineage_id=row["persona_lineage_id"],
                    )
            results: list[ToolCallCompleted] = []
            events: list[OutgoingEvent] = []
            bodies: list[bytes] = []
            for call, planned in zip(requests, writes, strict=True):
                memory = written.get(call.tool_call_id)
                if memory is None:
                    continue  # not the bench's case: its memories exist; counted as a failure
                results.append(result_for(call, *result_of_update(planned.write, memory)))
                events.extend(outgoing.for_call(call))
                bodies.extend(outgoing.bodies)
            await cursor.execute(FINISH, finish_params(results, events, bodies), prepare=True)
        self._published = [outgoing.event.event_id for outgoing in events]
        return len(written)


def _call(
    templates: dict[Target, ToolCallRequested], target: Target, tool_call_id: str, number: int
) -> tuple[ToolCallRequested, int, str]:
    """A real call updating `target`: (call, memory id, content).

    The target's first call is built whole (`tool_call`); later ones copy it with new ids
    and content, which keeps this loop's own Python cost small.
    """
    content = content_for(number)
    arguments = {"memory_id": target.memory_id, "memory_content": content}
    template = templates.get(target)
    if template is None:
        template = templates[target] = tool_call(target, tool_call_id, content)
    call = template.model_copy(
        update={"tool_call_id": tool_call_id, "event_id": uuid.uuid4(), "arguments": arguments}
    )
    return call, target.memory_id, content


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
    connection = await CommittingConnection.connect(url, sample)
    try:
        templates: dict[Target, ToolCallRequested] = {}
        number = 0

        async def transaction() -> int:
            nonlocal number
            calls = []
            for _ in range(batch):
                target = targets[number % len(targets)]
                calls.append(_call(templates, target, f"{tag}:{number}", number))
                number += 1
            return await connection.commit(calls)

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
    finally:
        await connection.close()


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
