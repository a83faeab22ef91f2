"""The gateway's consumers over their shared base: decode, hand over, settle. In process, with
fake messages (no broker); each settlement is the one `infra.messaging.settlement` decides."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from aio_pika.abc import AbstractChannel, AbstractIncomingMessage

from contracts import (
    UPDATE_LONG_TERM_MEMORY,
    CacheInvalidate,
    DataRequestCompleted,
    EmbedPayload,
    EmbedRequested,
    MemoryStatus,
    NoticeRetract,
    RequestedBy,
    Subject,
    ToolCallCompleted,
    Topology,
    encode_event,
)
from gateway import CacheInvalidationConsumer, GatewayCaches, ShardConsumer, TTLCache
from gateway.delivery import Delivery, Retraction, SendResult
from gateway.notices import RetractError

USER_ID = "100000000000000002"


@dataclass
class Incoming:
    """An aio-pika delivery that records how it was settled."""

    body: bytes
    settled: list[tuple[Any, ...]] = field(default_factory=list)
    headers: dict[str, Any] = field(default_factory=dict)
    exchange: str = "ltm.events"
    routing_key: str = "cache.user.1"
    message_id: str | None = "m-1"
    correlation_id: str | None = None
    redelivered: bool = False

    async def ack(self) -> None:
        self.settled.append(("ack",))

    async def nack(self, requeue: bool = True) -> None:
        self.settled.append(("nack", requeue))

    async def reject(self, requeue: bool = False) -> None:
        self.settled.append(("reject", requeue))


class NoResults:
    def resolve(self, completed: ToolCallCompleted) -> bool:
        return False


class Unreachable:
    """An embed sender whose Discord is away: every send is to be tried later."""

    async def send(self, request: Any) -> SendResult:
        return SendResult(Delivery.RETRY_LATER)

    async def retract(self, channel_id: str, message_id: str) -> Retraction:
        return Retraction.RETRY_LATER


@dataclass
class Answers:
    """The data requests' answers handed over."""

    received: list[DataRequestCompleted] = field(default_factory=list)

    def resolve(self, completed: DataRequestCompleted) -> bool:
        self.received.append(completed)
        return True


def _caches() -> GatewayCaches[Any, Any]:
    caches: GatewayCaches[Any, Any] = GatewayCaches(TTLCache(60.0), TTLCache(60.0))
    caches.user.set(USER_ID, "Alice")
    return caches


def _cache_consumer(caches: GatewayCaches[Any, Any]) -> CacheInvalidationConsumer:
    channel = cast(AbstractChannel, None)  # not consumed from: messages are handed in
    return CacheInvalidationConsumer(channel, Topology("ltm-unit"), caches, "unit")


async def _deliver(consumer: Any, message: Incoming) -> None:
    await consumer._on_message(cast(AbstractIncomingMessage, message))


async def test_an_invalidation_drops_the_entry_and_is_acked() -> None:
    caches = _caches()
    message = Incoming(encode_event(CacheInvalidate(cache="user", key=USER_ID)))
    await _deliver(_cache_consumer(caches), message)
    assert caches.user.get(USER_ID) is None
    assert message.settled == [("ack",)]


async def test_an_undecodable_message_is_rejected_without_requeue() -> None:
    caches = _caches()
    message = Incoming(b"not json")
    await _deliver(_cache_consumer(caches), message)
    assert message.settled == [("reject", False)]
    assert caches.user.get(USER_ID) == "Alice"


async def test_an_event_that_does_not_belong_on_the_queue_is_rejected_without_requeue() -> None:
    completed = ToolCallCompleted(
        tool_call_id="call-1",
        tool_name=UPDATE_LONG_TERM_MEMORY,
        guild_id="1",
        channel_id="2",
        shard_id=0,
        success=True,
        status=MemoryStatus.UPDATED,
        message="done",
    )
    message = Incoming(encode_event(completed))
    await _deliver(_cache_consumer(_caches()), message)
    assert message.settled == [("reject", False)]


async def test_an_embed_discord_cannot_take_yet_is_nacked_back_to_its_queue() -> None:
    embed = EmbedRequested(
        tool_call_id="call-2",
        guild_id="1",
        channel_id="2",
        shard_id=0,
        kind="memory_updated",
        embed=EmbedPayload(title="Tomori updated a memory", description="tea", color=0),
    )
    consumer = ShardConsumer(
        cast(AbstractChannel, None),
        Topology("ltm-unit"),
        sender=Unreachable(),
        results=NoResults(),
    )
    message = Incoming(encode_event(embed), routing_key="embed.shard.0")
    await _deliver(consumer, message)
    # Not the message's fault: back to the queue, not counted toward a delivery limit.
    assert message.settled == [("nack", True)]
    assert embed.event_id not in consumer.seen


def _shard_consumer(answers: Answers | None = None) -> ShardConsumer:
    return ShardConsumer(
        cast(AbstractChannel, None),
        Topology("ltm-unit"),
        sender=Unreachable(),
        results=NoResults(),
        answers=answers,
    )


async def test_a_data_request_answer_goes_to_the_waiting_client_once() -> None:
    answers = Answers()
    consumer = _shard_consumer(answers)
    completed = DataRequestCompleted(
        request_id="user-1",
        kind="export",
        subject=Subject(user_id=USER_ID),
        requested_by=RequestedBy(kind="user", id=USER_ID),
        status="refused",
        reason="not_the_subject",
    )
    first = Incoming(encode_event(completed), routing_key="result.shard.0")
    again = Incoming(encode_event(completed), routing_key="result.shard.0", redelivered=True)
    await _deliver(consumer, first)
    await _deliver(consumer, again)
    assert answers.received == [completed]
    assert first.settled == again.settled == [("ack",)]


async def test_a_retraction_discord_cannot_take_yet_is_nacked_back_to_its_queue() -> None:
    consumer = _shard_consumer()
    retract = NoticeRetract(channel_id="2", message_id="3", memory_id=7)
    message = Incoming(encode_event(retract), routing_key="retract.shard.0")
    await _deliver(consumer, message)
    assert message.settled == [("nack", True)]
    assert retract.event_id not in consumer.seen


@dataclass
class Notices:
    """A stand-in of `PostedNotices` that keeps what it was told; `failing`: the database away."""

    failing: bool = False
    calls: list[tuple[Any, ...]] = field(default_factory=list)

    async def record(self, notice: EmbedRequested, message_id: str) -> bool:
        if self.failing:
            raise OSError("database away")
        self.calls.append(("record", notice.event_id, message_id))
        return True

    async def retracted(self, channel_id: str, message_id: str) -> int:
        self.calls.append(("retracted", channel_id, message_id))
        return 1

    async def refused(self, channel_id: str, message_id: str, error: RetractError) -> int:
        self.calls.append(("refused", channel_id, message_id, error))
        return 1


@dataclass
class Posting:
    """An embed sender whose Discord posts every embed as message 99, and answers every
    retraction with `retraction`."""

    retraction: Retraction = Retraction.DELETED

    async def send(self, request: Any) -> SendResult:
        return SendResult(Delivery.SENT, "99")

    async def retract(self, channel_id: str, message_id: str) -> Retraction:
        return self.retraction


def _consumer_with(sender: Any, notices: Notices) -> ShardConsumer:
    return ShardConsumer(
        cast(AbstractChannel, None),
        Topology("ltm-unit"),
        sender=sender,
        results=NoResults(),
        notices=notices,
    )


def _notice_embed() -> EmbedRequested:
    return EmbedRequested(
        tool_call_id="call-3",
        guild_id="1",
        channel_id="2",
        shard_id=0,
        kind="memory_updated",
        embed=EmbedPayload(title="Tomori updated a memory", description="tea", color=0),
        memory_id=7,
        scope="server_wide",
    )


async def test_a_posted_notice_is_recorded_before_its_embed_counts_as_handled() -> None:
    notices = Notices()
    embed = _notice_embed()
    message = Incoming(encode_event(embed), routing_key="embed.shard.0")
    consumer = _consumer_with(Posting(), notices)
    await _deliver(consumer, message)
    assert notices.calls == [("record", embed.event_id, "99")]
    assert message.settled == [("ack",)]
    assert embed.event_id in consumer.seen


async def test_a_notice_that_cannot_be_recorded_is_requeued_to_be_recorded_later() -> None:
    embed = _notice_embed()
    message = Incoming(encode_event(embed), routing_key="embed.shard.0")
    consumer = _consumer_with(Posting(), Notices(failing=True))
    await _deliver(consumer, message)
    assert message.settled == [("nack", True)]
    assert embed.event_id not in consumer.seen


async def test_each_retraction_outcome_settles_the_record_as_it_says() -> None:
    expected = {
        Retraction.DELETED: [("retracted", "2", "3")],
        Retraction.FORBIDDEN: [("refused", "2", "3", "forbidden")],
        Retraction.REJECTED: [("refused", "2", "3", "rejected")],
    }
    for retraction, calls in expected.items():
        notices = Notices()
        retract = NoticeRetract(channel_id="2", message_id="3", memory_id=7)
        message = Incoming(encode_event(retract), routing_key="retract.shard.0")
        await _deliver(_consumer_with(Posting(retraction), notices), message)
        assert (notices.calls, message.settled) == (calls, [("ack",)]), retraction
