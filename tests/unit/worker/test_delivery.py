"""The worker's handling of one delivery, down to how it is settled: in process, with a fake
channel, message, publisher and batcher (the pipeline itself is not run), and the worker's
hooks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from aiormq.abc import DeliveredMessage

from contracts import (
    CREATE_LONG_TERM_MEMORY,
    DATA_REQUEST_ROUTING_KEY,
    Event,
    ToolCallRequested,
    Topology,
    encode_event,
)
from infra.settings import Settings
from tests.unit.worker.given import context
from worker.adapters.metrics import WorkerMetrics
from worker.batching import CallBatcher, GroupCommit
from worker.core.outgoing import OutboxRow
from worker.runtime.connection import Links
from worker.runtime.delivery import DeliveryHandler
from worker.runtime.hooks import FailpointHooks, Hooks, MetricsHooks, TracingHooks


@dataclass
class RecordingChannel:
    frames: list[tuple[Any, ...]] = field(default_factory=list)

    async def basic_ack(self, tag: int, *, wait: bool = True) -> None:
        self.frames.append(("ack", tag))

    async def basic_nack(self, tag: int, *, requeue: bool = True, wait: bool = True) -> None:
        self.frames.append(("nack", tag, requeue))

    async def basic_reject(self, tag: int, *, requeue: bool = True, wait: bool = True) -> None:
        self.frames.append(("reject", tag, requeue))


@dataclass
class Properties:
    message_id: str | None = "event-1"
    correlation_id: str | None = None
    user_id: str | None = "ltm-bot"
    headers: dict[str, Any] = field(default_factory=dict)


@dataclass
class Header:
    properties: Properties


@dataclass
class Delivery:
    body: bytes
    channel: RecordingChannel = field(default_factory=RecordingChannel)
    header: Header = field(default_factory=lambda: Header(Properties()))
    delivery_tag: int = 3
    exchange: str = "ltm.tool_calls"
    routing_key: str = CREATE_LONG_TERM_MEMORY


@dataclass
class FakePublisher:
    dead_letters: list[str] = field(default_factory=list)
    results: list[Any] = field(default_factory=list)
    refuse_dead_letters: bool = False

    closed = False

    async def dead_letter(self, message: DeliveredMessage, reason: str, *, event_id: str) -> None:
        if self.refuse_dead_letters:
            raise ConnectionError("publish refused")
        self.dead_letters.append(reason)

    async def publish_event(
        self, event: Event, routing_key: str, ttl_ms: int | None, *, replayed: bool = False
    ) -> None:
        self.results.append((event, routing_key))

    async def publish_rows(self, rows: Sequence[OutboxRow], *, in_call: bool = False) -> None:
        raise AssertionError("no call commits here")


class FakeShardQueues:
    async def ensure(self, shard_id: int) -> None:
        pass


class FailingBatcher:
    async def submit(self, key: str, item: Any) -> Any:
        raise LookupError("a bug in the pipeline")


def _handler(settings: Settings, publisher: FakePublisher) -> tuple[DeliveryHandler, WorkerMetrics]:
    metrics = WorkerMetrics()
    links = Links(publisher=publisher, shard_queues=FakeShardQueues())
    hooks = Hooks(TracingHooks(Topology("ltm-unit")), MetricsHooks(metrics), FailpointHooks())
    handler = DeliveryHandler(
        settings,
        links,
        hooks=hooks,
        batcher=cast(CallBatcher[Any, Any], FailingBatcher()),
        published=cast(GroupCommit[Any], None),
    )
    return handler, metrics


def _dead_lettered(metrics: WorkerMetrics, cause: str) -> float:
    value = metrics.registry.get_sample_value("ltm_dead_lettered_total", {"cause": cause})
    return value or 0.0


async def test_an_invalid_envelope_is_dead_lettered_with_its_reason_then_acked() -> None:
    publisher = FakePublisher()
    handler, metrics = _handler(Settings(), publisher)
    delivery = Delivery(body=b'{"not": "a call"}')
    await handler.on_delivery(cast(DeliveredMessage, delivery))
    [reason] = publisher.dead_letters
    assert reason.startswith("invalid envelope: ")
    assert delivery.channel.frames == [("ack", 3)]
    assert handler.in_flight == set()
    assert _dead_lettered(metrics, "invalid_envelope") == 1.0


async def test_an_untrusted_publisher_is_dead_lettered_unread() -> None:
    publisher = FakePublisher()
    handler, _ = _handler(Settings(trusted_publishers="ltm-bot"), publisher)
    delivery = Delivery(body=b"{}", header=Header(Properties(user_id="intruder")))
    await handler.on_delivery(cast(DeliveredMessage, delivery))
    [reason] = publisher.dead_letters
    assert reason.startswith("untrusted publisher: user_id 'intruder'")
    assert delivery.channel.frames == [("ack", 3)]


async def test_a_dead_letter_copy_not_published_leaves_the_call_for_redelivery() -> None:
    publisher = FakePublisher(refuse_dead_letters=True)
    handler, _ = _handler(Settings(), publisher)
    delivery = Delivery(body=b"not json")
    await handler.on_delivery(cast(DeliveredMessage, delivery))
    # Rejected with requeue: a failure that counts toward the queue's delivery limit.
    assert delivery.channel.frames == [("reject", 3, True)]


async def test_a_pipeline_fault_answers_the_bot_then_dead_letters_the_call() -> None:
    publisher = FakePublisher()
    handler, metrics = _handler(Settings(), publisher)
    call = ToolCallRequested(
        tool_call_id="call-unit-1",
        tool_name=CREATE_LONG_TERM_MEMORY,
        arguments={"content": "likes tea"},
        context=context(),
    )
    delivery = Delivery(body=encode_event(call))
    await handler.on_delivery(cast(DeliveredMessage, delivery))
    [(result, routing_key)] = publisher.results
    assert result.tool_call_id == "call-unit-1"
    assert not result.success
    assert routing_key == "result.shard.0"
    [reason] = publisher.dead_letters
    assert reason.startswith("internal error: LookupError")
    assert delivery.channel.frames == [("ack", 3)]
    assert _dead_lettered(metrics, "internal_error") == 1.0


async def test_a_data_request_is_told_by_its_routing_key_and_never_reaches_the_batcher() -> None:
    publisher = FakePublisher()
    handler, metrics = _handler(Settings(), publisher)
    # A tool call's body under the data-request key: not the event the key promises.
    call = ToolCallRequested(
        tool_call_id="call-unit-2", tool_name=CREATE_LONG_TERM_MEMORY, context=context()
    )
    delivery = Delivery(body=encode_event(call), routing_key=DATA_REQUEST_ROUTING_KEY)
    await handler.on_delivery(cast(DeliveredMessage, delivery))
    [reason] = publisher.dead_letters
    assert reason == "unsupported event 'tool_call.requested' with routing key data_request"
    assert publisher.results == []  # no tool result: the batcher was never asked
    assert delivery.channel.frames == [("ack", 3)]
    assert _dead_lettered(metrics, "invalid_envelope") == 1.0


async def test_an_unreadable_data_request_is_dead_lettered_as_an_invalid_envelope() -> None:
    publisher = FakePublisher()
    handler, _ = _handler(Settings(), publisher)
    delivery = Delivery(body=b'{"kind": "erase"}', routing_key=DATA_REQUEST_ROUTING_KEY)
    await handler.on_delivery(cast(DeliveredMessage, delivery))
    [reason] = publisher.dead_letters
    assert reason.startswith("invalid envelope: ")
    assert delivery.channel.frames == [("ack", 3)]
