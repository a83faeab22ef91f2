"""AMQP pieces the bench shares: the topology, tool-call messages, and the result counter.

The topology is the worker's own (`infra.messaging.topology.declare_topology`), plus one bench queue
bound `result.shard.*` on the events exchange: it receives every `tool_call.completed`, which
the counter tallies per run (the run is the part of the `tool_call_id` before the colon).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import aiormq
import orjson
from aio_pika.abc import AbstractChannel, AbstractConnection
from aiormq.abc import DeliveredMessage
from pamqp.commands import Basic

from contracts import (
    CONTENT_TYPE,
    SCHEMA_VERSION,
    UPDATE_LONG_TERM_MEMORY,
    MemoryStatus,
    Topology,
    rfc3339_utc,
    utc_now,
)
from contracts.dead_letters import ATTEMPTS_HEADER, ERROR_HEADER, FAILED_AT_HEADER
from infra.messaging.confirms import ConfirmingChannel
from infra.messaging.topology import declare_topology

__all__ = [
    "RESULTS_BINDING",
    "CallPublisher",
    "OutgoingCall",
    "ResultCounter",
    "Tally",
    "dead_letter_headers",
    "declare",
    "outgoing_call",
]

RESULTS_BINDING: Final = "result.shard.*"
_SUCCESSES: Final = frozenset({MemoryStatus.UPDATED.value, MemoryStatus.SAVED.value})


async def declare(connection: AbstractConnection, topology: Topology) -> None:
    """Exactly what the worker declares at start (no shard queues)."""
    channel = await connection.channel()
    await declare_topology(channel, topology)
    await channel.close()


@dataclass(frozen=True, slots=True)
class OutgoingCall:
    """A `tool_call.requested` ready to publish, built before any clock starts."""

    body: bytes
    properties: Basic.Properties
    routing_key: str  # the tool's name


def outgoing_call(
    body: bytes,
    *,
    message_id: str,
    correlation_id: str,
    tool_name: str = UPDATE_LONG_TERM_MEMORY,
    headers: Mapping[str, Any] | None = None,
) -> OutgoingCall:
    """A call with the properties every message carries (docs/contract.md); `headers`: more
    of them (`dead_letter_headers`)."""
    return OutgoingCall(
        body,
        Basic.Properties(
            content_type=CONTENT_TYPE,
            delivery_mode=2,
            message_id=message_id,
            correlation_id=correlation_id,
            message_type="tool_call.requested",
            timestamp=utc_now(),
            headers={"schema_version": SCHEMA_VERSION, **(headers or {})},
        ),
        tool_name,
    )


def dead_letter_headers(reason: str) -> dict[str, Any]:
    """What the worker adds to a call it dead-letters (contracts.dead_letters): why, when,
    after how many deliveries."""
    return {ERROR_HEADER: reason, FAILED_AT_HEADER: rfc3339_utc(utc_now()), ATTEMPTS_HEADER: 1}


class CallPublisher:
    """Publishes tool calls with confirms, on aiormq directly as the worker publishes events.

    On this machine the bench shares two cores with what it measures: every cycle the
    publisher spends (aio-pika's message objects, its channel lock held until the socket
    drains) is a cycle the worker, RabbitMQ and PostgreSQL wait for.
    """

    def __init__(self, confirming: ConfirmingChannel, exchange: str) -> None:
        self._confirming = confirming
        self._exchange = exchange

    @classmethod
    async def open(
        cls, connection: AbstractConnection, topology: Topology, *, dead_letters: bool = False
    ) -> CallPublisher:
        """`dead_letters`: to the dead-letter exchange, as the worker gives calls up."""
        exchange = topology.dead_letter_exchange if dead_letters else topology.tool_calls_exchange
        return cls(await ConfirmingChannel.open(connection), exchange)

    async def publish(self, call: OutgoingCall) -> None:
        """Returns once the broker confirmed it; raises if it refused it (and the next
        publish goes out on a new channel: `infra.messaging.confirms`)."""
        raw = self._confirming.raw
        try:
            await raw.basic_publish(
                call.body,
                exchange=self._exchange,
                routing_key=call.routing_key,
                properties=call.properties,
                wait=False,
            )
        except aiormq.exceptions.DeliveryError:
            self._confirming.refused(raw)
            raise

    async def publish_window(self, calls: Iterable[OutgoingCall], *, window: int) -> int:
        """Publishes all, with up to `window` confirms outstanding; returns how many."""
        semaphore = asyncio.Semaphore(window)
        tasks: list[asyncio.Task[None]] = []

        async def one(call: OutgoingCall) -> None:
            try:
                await self.publish(call)
            finally:
                semaphore.release()

        for call in calls:
            await semaphore.acquire()
            tasks.append(asyncio.create_task(one(call)))
        await asyncio.gather(*tasks)
        return len(tasks)

    async def close(self) -> None:
        await self._confirming.close()


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
        """Results that are not the success the bench's calls are made for (an update's or a
        creation's)."""
        return sum(n for status, n in self.statuses.items() if status not in _SUCCESSES)

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
        self._channel: AbstractChannel | None = None

    async def start(self, connection: AbstractConnection, topology: Topology) -> None:
        channel = await connection.channel()
        events = await channel.get_exchange(topology.events_exchange, ensure=False)
        queue = await channel.declare_queue(
            f"{topology.prefix}.bench.results", exclusive=True, auto_delete=True
        )
        await queue.bind(events, routing_key=RESULTS_BINDING)
        # Straight from aiormq, for the reason `CallPublisher` gives.
        raw = await channel.get_underlay_channel()
        await raw.basic_consume(queue.name, self._on_message, no_ack=True)
        self._channel = channel

    def expect(self, run: str, expected: int) -> Tally:
        if ":" in run:
            raise ValueError(f"a run name has no colon: {run!r}")
        tally = Tally(expected=expected)
        self._tallies[run] = tally
        return tally

    def forget(self, run: str) -> None:
        self._tallies.pop(run, None)

    async def _on_message(self, message: DeliveredMessage) -> None:
        at = time.perf_counter()
        tool_call_id = message.header.properties.correlation_id or ""
        tally = self._tallies.get(tool_call_id.partition(":")[0])
        if tally is None:
            return
        try:
            status = str(orjson.loads(message.body).get("status", "?"))
        except orjson.JSONDecodeError:
            status = "undecodable"
        tally.add(tool_call_id, status, at)
