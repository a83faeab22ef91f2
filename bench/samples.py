"""The events of one real call, as the running worker emits them: the bench's message shapes.

The database and broker limits replay these bodies (same count, sizes, routing keys,
time-to-live) instead of inventing their own, so they measure the work the worker's output
really costs. They are captured from a private queue bound `#` on the events exchange.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aio_pika
import orjson
from aio_pika.abc import AbstractConnection, AbstractIncomingMessage
from pamqp.commands import Basic

from bench.amqp import CallPublisher, outgoing_call
from bench.world import CallMaker, events_queued_for
from contracts import CONTENT_TYPE, MemoryStatus, Topology, schema_version_of
from harness.waiting import eventually
from worker.adapters.broker import event_properties

__all__ = ["Sample", "SampleEvent", "capture", "message_for", "properties_for"]


@dataclass(frozen=True, slots=True)
class SampleEvent:
    event_type: str
    routing_key: str
    body: bytes
    ttl_ms: int | None
    correlated: bool  # carries the tool call's id as its correlation id


@dataclass(frozen=True, slots=True)
class Sample:
    """What one successful call (a server memory's update, or creation) emits, and the result
    the inbox stores."""

    events: tuple[SampleEvent, ...]
    status: str
    result: str  # the inbox's `result` JSON: status, message, data

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "status": self.status,
                "result": self.result,
                "events": [
                    {
                        "event_type": event.event_type,
                        "routing_key": event.routing_key,
                        "body": event.body.decode(),
                        "ttl_ms": event.ttl_ms,
                        "correlated": event.correlated,
                    }
                    for event in self.events
                ],
            }
        )

    @classmethod
    def from_json(cls, raw: bytes) -> Sample:
        data: dict[str, Any] = orjson.loads(raw)
        return cls(
            status=data["status"],
            result=data["result"],
            events=tuple(
                SampleEvent(
                    event_type=item["event_type"],
                    routing_key=item["routing_key"],
                    body=item["body"].encode(),
                    ttl_ms=item["ttl_ms"],
                    correlated=item["correlated"],
                )
                for item in data["events"]
            ),
        )

    @classmethod
    def load(cls, path: Path) -> Sample:
        return cls.from_json(path.read_bytes())

    def sizes(self) -> dict[str, int]:
        return {event.event_type: len(event.body) for event in self.events}


async def capture(
    connection: AbstractConnection,
    topology: Topology,
    database_url: str,
    calls: CallMaker,
    *,
    expected: MemoryStatus = MemoryStatus.UPDATED,
    tool_call_id: str = "sample:0",
    timeout: float = 30.0,
) -> Sample:
    """Publishes one real call (the first `calls` makes) and keeps what the worker emits for it;
    its answer must be `expected`.

    The result comes after the commit, which queued every event of the call in the outbox:
    from then on their number is known, and the capture waits until it has them all.
    """
    channel = await connection.channel()
    events = await channel.get_exchange(topology.events_exchange, ensure=False)
    queue = await channel.declare_queue(
        f"{topology.prefix}.bench.sample", exclusive=True, auto_delete=True
    )
    await queue.bind(events, routing_key="#")
    seen: list[AbstractIncomingMessage] = []

    async def keep(message: AbstractIncomingMessage) -> None:
        if message.correlation_id == tool_call_id:
            seen.append(message)

    await queue.consume(keep, no_ack=True)
    call = calls(tool_call_id, 0)
    publisher = await CallPublisher.open(connection, topology)
    await publisher.publish(
        outgoing_call(
            call.model_dump_json().encode(),
            message_id=str(call.event_id),
            correlation_id=tool_call_id,
            tool_name=call.tool_name,
        )
    )
    queued: list[int] = []  # known once the result is in

    async def complete() -> bool:
        if not queued:
            if not any(m.type == "tool_call.completed" for m in seen):
                return False
            queued.append(await events_queued_for(database_url, tool_call_id))
        return len(seen) >= queued[0]

    await eventually(complete, timeout=timeout, what="every event of the sample call")
    await channel.close()
    await publisher.close()
    [result] = [m for m in seen if m.type == "tool_call.completed"]
    answer = orjson.loads(result.body)
    if answer.get("status") != expected.value:
        raise RuntimeError(f"the sample call was not answered {expected.value}: {answer}")
    return Sample(
        events=tuple(_event(message) for message in seen),
        status=answer["status"],
        result=orjson.dumps(
            {"status": answer["status"], "message": answer["message"], "data": answer["data"]}
        ).decode(),
    )


def _event(message: AbstractIncomingMessage) -> SampleEvent:
    expiration = message.expiration  # seconds, as aio-pika decodes the property
    ttl_ms = round(expiration * 1000) if isinstance(expiration, int | float) else None
    return SampleEvent(
        event_type=message.type or "",
        routing_key=message.routing_key or "",
        body=bytes(message.body),
        ttl_ms=ttl_ms,
        correlated=message.correlation_id is not None,
    )


def properties_for(event: SampleEvent, message_id: str, correlation_id: str) -> Basic.Properties:
    """The event's properties as the worker's `EventPublisher.publish_row` builds them."""
    return event_properties(
        message_id, event.event_type, correlation_id if event.correlated else None, event.ttl_ms
    )


def message_for(event: SampleEvent, message_id: str, correlation_id: str) -> aio_pika.Message:
    """The event with the same properties, as an aio-pika message."""
    return aio_pika.Message(
        event.body,
        content_type=CONTENT_TYPE,
        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
        message_id=message_id,
        correlation_id=correlation_id if event.correlated else None,
        type=event.event_type,
        timestamp=datetime.now(UTC),
        headers={"schema_version": schema_version_of(event.event_type)},
        expiration=None if event.ttl_ms is None else max(event.ttl_ms, 1) / 1000,
    )
