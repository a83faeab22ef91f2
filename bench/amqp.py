"""AMQP pieces the bench shares: the topology, tool-call messages, and the result counter.

The topology is the worker's own (`infra.topology.declare_topology`), plus one bench queue
bound `result.shard.*` on the events exchange: it receives every `tool_call.completed`, which
the counter tallies per run (the run is the part of the `tool_call_id` before the colon).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final

import aio_pika
import orjson
from aio_pika.abc import AbstractConnection, AbstractExchange, AbstractIncomingMessage

from contracts import CONTENT_TYPE, SCHEMA_VERSION, UPDATE_LONG_TERM_MEMORY, Topology
from infra.topology import declare_topology

__all__ = [
    "RESULTS_BINDING",
    "ResultCounter",
    "Tally",
    "call_message",
    "declare",
    "publish_window",
]

RESULTS_BINDING: Final = "result.shard.*"


async def declare(connection: AbstractConnection, topology: Topology) -> None:
    """Exactly what the worker declares at start (no shard queues)."""
    channel = await connection.channel()
    await declare_topology(channel, topology)
    await channel.close()


def call_message(body: bytes, *, message_id: str, correlation_id: str) -> aio_pika.Message:
    """A `tool_call.requested` with the properties CONTRACT.md gives every message."""
    return aio_pika.Message(
        body,
        content_type=CONTENT_TYPE,
        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
        message_id=message_id,
        correlation_id=correlation_id,
        type="tool_call.requested",
        timestamp=datetime.now(UTC),
        headers={"schema_version": SCHEMA_VERSION},
    )


async def publish_window(
    exchange: AbstractExchange, messages: Iterable[aio_pika.Message], *, window: int
) -> int:
    """Publishes to the tool-call exchange with up to `window` confirms outstanding."""
    semaphore = asyncio.Semaphore(window)
    tasks: list[asyncio.Task[None]] = []

    async def one(message: aio_pika.Message) -> None:
        try:
            await exchange.publish(message, routing_key=UPDATE_LONG_TERM_MEMORY)
        finally:
            semaphore.release()

    for message in messages:
        await semaphore.acquire()
        tasks.append(asyncio.create_task(one(message)))
    await asyncio.gather(*tasks)
    return len(tasks)


@dataclass
class Tally:
    """The results of one run: when each call's result arrived, and with which status."""

    expected: int
    received: dict[str, float] = field(default_factory=dict)
    statuses: Counter[str] = field(default_factory=Counter)
    first: float | None = None
    last: float | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def count(self) -> int:
        return len(self.received)

    def add(self, tool_call_id: str, status: str, at: float) -> None:
        if tool_call_id in self.received:
            return  # a repeated answer (redelivery) is not a new result
        self.received[tool_call_id] = at
        self.statuses[status] += 1
        if self.first is None:
            self.first = at
        self.last = at
        if self.count >= self.expected:
            self.done.set()

    def rate(self) -> float:
        """Sustained results per second, first result to last."""
        if self.first is None or self.last is None or self.count < 2 or self.last <= self.first:
            return 0.0
        return (self.count - 1) / (self.last - self.first)

    def failures(self) -> int:
        return sum(
            n for status, n in self.statuses.items() if status != "memory_updated_successfully"
        )

    async def wait(self, timeout: float) -> bool:
        """Whether every expected result arrived within `timeout` seconds."""
        try:
            await asyncio.wait_for(self.done.wait(), timeout)
        except TimeoutError:
            return False
        return True


class ResultCounter:
    """Consumes the bench's result queue and tallies `tool_call.completed` per run."""

    def __init__(self) -> None:
        self._tallies: dict[str, Tally] = {}

    async def start(self, connection: AbstractConnection, topology: Topology) -> None:
        channel = await connection.channel()
        events = await channel.get_exchange(topology.events_exchange, ensure=False)
        queue = await channel.declare_queue(
            f"{topology.prefix}.bench.results", exclusive=True, auto_delete=True
        )
        await queue.bind(events, routing_key=RESULTS_BINDING)
        await queue.consume(self._on_message, no_ack=True)

    def expect(self, run: str, expected: int) -> Tally:
        if ":" in run:
            raise ValueError(f"a run name has no colon: {run!r}")
        tally = Tally(expected=expected)
        self._tallies[run] = tally
        return tally

    def forget(self, run: str) -> None:
        self._tallies.pop(run, None)

    async def _on_message(self, message: AbstractIncomingMessage) -> None:
        at = time.perf_counter()
        tool_call_id = message.correlation_id or ""
        tally = self._tallies.get(tool_call_id.partition(":")[0])
        if tally is None:
            return
        try:
            status = str(orjson.loads(message.body).get("status", "?"))
        except orjson.JSONDecodeError:
            status = "undecodable"
        tally.add(tool_call_id, status, at)
