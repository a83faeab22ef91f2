"""One trace from the bot's tool call to the posted embed, across separate processes.

The test process plays the bot (its `ToolClient` traced into the test's own OTLP receiver);
`ltm worker`, `ltm gateway` and `ltm dlq replay` run as processes exporting there too.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import aio_pika
import pytest
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractRobustConnection
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON

from contracts import (
    ToolCallCompleted,
    ToolCallRequested,
    Topology,
    amqp_properties,
    decode_event,
    encode_event,
    result_routing_key,
)
from gateway import MessageContext, ToolClient
from harness.broker import tap_events
from harness.fake_discord import FakeDiscord
from harness.processes import LtmProcess
from harness.services import TestServices
from harness.snowflake import snowflake
from harness.waiting import eventually
from harness.world import Persona, World, participant, tool_call
from infra.messaging.confirms import ConfirmingChannel
from infra.observability import tracing
from infra.settings import Settings
from infra.storage.database import database_name
from tests.support.otlp import OtlpReceiver, ReceivedSpan, SpanKind
from tests.support.tracing import traced_by

SHARD = 9_100  # a shard of this module's own: no other test consumes it


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as running:
        yield running


@pytest.fixture
def bot_tracing(receiver: OtlpReceiver) -> Iterator[TracerProvider]:
    """This process traced as a bot would be, into the receiver; off again afterwards."""
    provider = TracerProvider(resource=Resource.create({"service.name": "test-bot"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=receiver.endpoint)))
    with traced_by(provider):
        yield provider


@pytest.fixture(scope="module")
async def fake_discord() -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord() as fake:
        yield fake


def _worker(
    services: TestServices, receiver: OtlpReceiver, tmp: Path, name: str, **env: str
) -> LtmProcess:
    return LtmProcess(
        services, ("worker",), tmp / f"{name}.log", env={**receiver.env("ltm-worker"), **env}
    )


def _gateway(
    services: TestServices,
    receiver: OtlpReceiver,
    fake_discord: FakeDiscord,
    tmp: Path,
    **env: str,
) -> LtmProcess:
    """`ltm gateway` of this module's shard, posting to the fake Discord, traced."""
    return LtmProcess(
        services,
        ("gateway", "--shards", str(SHARD), "--shard-count", str(SHARD + 1)),
        tmp / "gateway.log",
        env={
            "DISCORD_TOKEN": "fake-token-tracing",
            "DISCORD_API_URL": fake_discord.url,
            **receiver.env("ltm-gateway"),
            **env,
        },
    )


@asynccontextmanager
async def _bot(amqp: AbstractRobustConnection, topology: Topology) -> AsyncIterator[ToolClient]:
    """A bot's tool client: it publishes, and a copy of the shard's results resolves its calls
    (the gateway process consumes the shard queue itself)."""
    publishing = await ConfirmingChannel.open(amqp)
    channel = publishing.channel
    client = ToolClient(publishing, topology, shards=(SHARD,))
    await client.start()
    events = await channel.get_exchange(topology.events_exchange, ensure=False)
    replies = await channel.declare_queue(exclusive=True, auto_delete=True)
    await replies.bind(events, routing_key=result_routing_key(SHARD))

    async def on_reply(message: AbstractIncomingMessage) -> None:
        async with message.process():
            event = decode_event(message.body)
            if isinstance(event, ToolCallCompleted):
                client.resolve(event)

    await replies.consume(on_reply)
    try:
        yield client
    finally:
        client.close()
        await publishing.close()


def _context(persona: Persona, channel_id: str) -> MessageContext:
    triggerer = snowflake()
    return MessageContext(
        guild_id=persona.server.disc_id,
        channel_id=channel_id,
        triggerer_id=triggerer,
        bot_user_id="100000000000000001",
        persona_id=persona.persona_id,
        shard_id=SHARD,
        participants=(participant(triggerer, "Bob"),),
    )


def _one(spans: Sequence[ReceivedSpan], what: str) -> ReceivedSpan:
    assert len(spans) == 1, f"expected one {what}, got {[s.name for s in spans]}"
    return spans[0]


def _named(spans: Sequence[ReceivedSpan], name: str, **attributes: object) -> list[ReceivedSpan]:
    return [
        span
        for span in spans
        if span.name == name
        and all(span.attributes.get(key) == value for key, value in attributes.items())
    ]


async def test_one_trace_holds_the_publish_the_transaction_and_the_embed_posted(
    services: TestServices,
    settings: Settings,
    amqp: AbstractRobustConnection,
    topology: Topology,
    world: World,
    receiver: OtlpReceiver,
    fake_discord: FakeDiscord,
    bot_tracing: TracerProvider,
    tmp_path: Path,
) -> None:
    persona = await world.persona(await world.server(), nickname="Tomori")
    memory_id = await world.server_memory(persona, "{user} waters the plants")
    channel_id = snowflake()
    gateway = _gateway(services, receiver, fake_discord, tmp_path)
    tool_call_id = f"traced-{uuid.uuid4()}"
    with _worker(services, receiver, tmp_path, "worker") as worker, gateway:
        await worker.wait_ready_async()
        await gateway.wait_ready_async()
        async with _bot(amqp, topology) as client:
            answer = await client.call(
                tool_call_id,
                "update_long_term_memory",
                {"memory_id": memory_id, "memory_content": "{user} waters the plants daily"},
                _context(persona, channel_id),
                timeout_s=20,
            )
        assert answer["success"] is True

        def complete(spans: list[ReceivedSpan]) -> bool:
            # A parent ends after its children: the last to come are the consumers' spans.
            traces = {
                span.trace_id
                for span in spans
                if span.attributes.get("messaging.message.conversation_id") == tool_call_id
            }
            names = [span.name for span in spans if span.trace_id in traces]
            return (
                names.count(f"process {topology.events_exchange}") == 2
                and f"process {topology.tool_calls_exchange}" in names
                and "POST /channels/{channel.id}/messages" in names
            )

        await receiver.wait_for(complete, what="every span of the call's trace")
        worker_log = worker.output()

    [publish] = receiver.spans(
        lambda span: (
            span.service == "test-bot"
            and span.attributes.get("messaging.message.conversation_id") == tool_call_id
        )
    )
    assert publish.is_root and publish.kind == SpanKind.SPAN_KIND_PRODUCER
    trace = receiver.trace(publish.trace_id)
    database = database_name(settings.database_url)
    events = topology.events_exchange

    consume = _one(_named(trace, f"process {topology.tool_calls_exchange}"), "consume")
    result_delivered = _one(
        _named(trace, f"process {events}", **{_ROUTING_KEY: result_routing_key(SHARD)}),
        "result's delivery",
    )
    embed_delivered = _one(
        _named(trace, f"process {events}", **{_ROUTING_KEY: f"embed.shard.{SHARD}"}),
        "embed's delivery",
    )
    post = _one(_named(trace, "POST /channels/{channel.id}/messages"), "embed's post")

    # Who made each, and from which span it continued: across three processes, one trace.
    assert consume.service == "ltm-worker"
    assert (result_delivered.service, post.service) == ("ltm-gateway",) * 2
    # One span in the worker: none of their own for the transaction, the events' publish or
    # the ack.
    assert [span.name for span in trace if span.service == "ltm-worker"] == [consume.name]
    assert consume.parent_span_id == publish.span_id
    # The transaction: two events on the call's span.
    (begin, begun_ns, begun), (commit, committed_ns, _) = consume.events
    assert (begin, commit) == ("ltm.transaction.begin", "ltm.transaction.commit")
    assert begun == {
        "db.system.name": "postgresql",
        "db.namespace": database,
        "messaging.batch.message_count": 1,
    }
    # The call's events (result, embed, cache, memory) carry its span's context.
    assert result_delivered.parent_span_id == consume.span_id
    assert embed_delivered.parent_span_id == consume.span_id
    assert post.parent_span_id == embed_delivered.span_id
    order = [publish.start_ns, consume.start_ns, begun_ns, committed_ns]
    order += [result_delivered.start_ns, post.start_ns]
    assert order == sorted(order)  # the events published after the commit

    # The semantic conventions' attributes.
    assert publish.attributes == {
        "messaging.system": "rabbitmq",
        "messaging.operation.name": "send",
        "messaging.operation.type": "send",
        "messaging.destination.name": topology.tool_calls_exchange,
        _ROUTING_KEY: "update_long_term_memory",
        "messaging.message.id": publish.attributes["messaging.message.id"],
        "messaging.message.conversation_id": tool_call_id,
    }
    assert consume.kind == SpanKind.SPAN_KIND_CONSUMER
    assert consume.attributes["messaging.operation.type"] == "process"
    assert consume.attributes["messaging.destination.subscription.name"] == topology.worker_queue
    assert consume.attributes["messaging.message.id"] == publish.attributes["messaging.message.id"]
    assert consume.attributes["ltm.delivery.settlement"] == "ack"
    assert post.kind == SpanKind.SPAN_KIND_CLIENT
    assert post.attributes["http.request.method"] == "POST"
    assert [request.channel_id for request in fake_discord.requests].count(channel_id) == 1

    # Each outbox row keeps the context of the call that wrote it.
    rows = await world.outbox_of_call(tool_call_id)
    assert len(rows) == 4
    stored = {tuple(row["traceparent"].split("-")[:3]) for row in rows}
    assert stored == {("00", publish.trace_id, consume.span_id)}
    # And the worker's log lines about the call carry the trace.
    lines = [json.loads(line) for line in worker_log.splitlines() if line.startswith("{")]
    answered = [
        line
        for line in lines
        if line.get("event") == "worker.call_answered" and line.get("tool_call_id") == tool_call_id
    ]
    assert [(line["trace_id"], line["span_id"]) for line in answered] == [
        (publish.trace_id, consume.span_id)
    ]


_ROUTING_KEY = "messaging.rabbitmq.destination.routing_key"


async def test_a_call_the_bot_left_out_is_left_out_everywhere(
    services: TestServices,
    channel: AbstractChannel,
    amqp: AbstractRobustConnection,
    topology: Topology,
    world: World,
    receiver: OtlpReceiver,
    fake_discord: FakeDiscord,
    tmp_path: Path,
) -> None:
    persona = await world.persona(await world.server(), nickname="Tomori")
    left_out, sampled = f"left-out-{uuid.uuid4()}", f"sampled-{uuid.uuid4()}"
    # The receiver is the module's: what earlier tests' processes sent is not this test's.
    earlier = {(span.trace_id, span.span_id) for span in receiver.spans()}
    channel_id = snowflake()
    # Both processes would sample every new trace: what they leave out, the bot's flag did.
    every_trace = {"OTEL_TRACES_SAMPLER": "parentbased_always_on"}
    gateway = _gateway(services, receiver, fake_discord, tmp_path, **every_trace)
    with (
        _worker(services, receiver, tmp_path, "worker", **every_trace) as worker,
        gateway,
    ):
        await worker.wait_ready_async()
        await gateway.wait_ready_async()
        async with (
            tap_events(channel, topology.events_exchange) as events,
            _bot(amqp, topology) as client,
        ):
            calls = ((left_out, ALWAYS_OFF), (sampled, ALWAYS_ON))
            for posts, (tool_call_id, bot_sampler) in enumerate(calls, start=1):
                memory_id = await world.server_memory(persona, f"{{user}} plays {tool_call_id}")
                provider = TracerProvider(
                    sampler=bot_sampler, resource=Resource.create({"service.name": "test-bot"})
                )
                provider.add_span_processor(
                    SimpleSpanProcessor(OTLPSpanExporter(endpoint=receiver.endpoint))
                )
                with traced_by(provider):
                    answer = await client.call(
                        tool_call_id,
                        "update_long_term_memory",
                        {"memory_id": memory_id, "memory_content": "{user} plays chess"},
                        _context(persona, channel_id),
                        timeout_s=20,
                    )
                assert answer["success"] is True

                # Its embed posted (the gateway's span of it, if any, ends before the next).
                async def embed_posted(count: int = posts) -> bool:
                    return len(fake_discord.posts(channel_id)) == count

                await eventually(embed_posted, what=f"{tool_call_id}'s embed posted")

            def posted(spans: list[ReceivedSpan]) -> bool:
                traces = {
                    span.trace_id
                    for span in spans
                    if span.attributes.get("messaging.message.conversation_id") == sampled
                }
                names = [span.name for span in spans if span.trace_id in traces]
                return "POST /channels/{channel.id}/messages" in names

            # Exported after whatever the left-out call's processes would have made.
            spans = await receiver.wait_for(posted, what="the sampled call's embed posted")
            await events.wait_until(
                lambda tap: len(tap.deliveries_with(correlation_id=left_out)) == 4,
                what="the left-out call's four events",
            )

    left_out_events = events.deliveries_with(correlation_id=left_out)
    sampled_events = events.deliveries_with(correlation_id=sampled)
    # The left-out call's events carry no context, and no span anywhere is about it.
    assert [delivery.headers.get("traceparent") for delivery in left_out_events] == [None] * 4
    assert all("traceparent" in delivery.headers for delivery in sampled_events)
    about = [
        span.service
        for span in spans
        if span.attributes.get("messaging.message.conversation_id") == left_out
    ]
    assert about == []
    # Every span the gateway made belongs to the sampled call's trace.
    sampled_traces = {
        span.trace_id
        for span in spans
        if span.attributes.get("messaging.message.conversation_id") == sampled
    }
    gateway_traces = {
        span.trace_id
        for span in spans
        if span.service == "ltm-gateway" and (span.trace_id, span.span_id) not in earlier
    }
    assert gateway_traces and gateway_traces <= sampled_traces


async def _publish_traced(
    channel: AbstractChannel, topology: Topology, call: ToolCallRequested
) -> None:
    """As a bot's tool client publishes: a trace of its own for each call."""
    exchange = await channel.get_exchange(topology.tool_calls_exchange, ensure=False)
    properties = amqp_properties(call)
    with tracing.sending(
        exchange=exchange.name,
        routing_key=call.tool_name,
        message_id=properties["message_id"],
        conversation_id=call.tool_call_id,
        headers=properties["headers"],
        parent=None,
    ):
        await exchange.publish(
            aio_pika.Message(encode_event(call), **properties), routing_key=call.tool_name
        )


async def test_calls_batched_together_keep_their_traces_apart(
    services: TestServices,
    settings: Settings,
    channel: AbstractChannel,
    topology: Topology,
    world: World,
    receiver: OtlpReceiver,
    bot_tracing: TracerProvider,
    tmp_path: Path,
) -> None:
    persona = await world.persona(await world.server())
    calls = []
    for number in range(4):
        memory_id = await world.server_memory(persona, f"fact {number}")
        triggerer = snowflake()
        calls.append(
            tool_call(
                persona,
                {"memory_id": memory_id, "memory_content": f"fact {number} v2"},
                triggerer_id=triggerer,
                participants=(participant(triggerer, "Bob"),),
            )
        )
    ids = {call.tool_call_id for call in calls}
    async with tap_events(channel, topology.events_exchange, ["result.#"]) as results:
        # Queued before the worker starts, so that they share its first transaction.
        for call in calls:
            await _publish_traced(channel, topology, call)
        with _worker(services, receiver, tmp_path, "batching") as worker:
            await worker.wait_ready_async()
            await results.wait_until(
                lambda tap: ids <= {r.tool_call_id for r in tap.events(ToolCallCompleted)},
                what="every call answered",
            )

            def acked(spans: list[ReceivedSpan]) -> bool:
                return len(_acked(spans, ids)) == len(ids)

            spans = await receiver.wait_for(acked, what="every call's span, ended by its ack")

    consumes = {
        span.attributes["messaging.message.conversation_id"]: span
        for span in spans
        if span.name == f"process {topology.tool_calls_exchange}"
        and span.attributes.get("messaging.message.conversation_id") in ids
    }
    assert set(consumes) == ids
    # Each call in a trace of its own, begun by its own publish.
    assert len({span.trace_id for span in consumes.values()}) == len(ids)
    # No span of the batch's: its transaction is on each call's span, with how many shared it.
    assert not [span for span in spans if span.service == "ltm-worker" and span.is_root]
    batched = []
    for consume in consumes.values():
        assert not consume.links
        [(begin, begun_ns, begun), (commit, committed_ns, _)] = consume.events
        assert (begin, commit) == ("ltm.transaction.begin", "ltm.transaction.commit")
        assert consume.start_ns <= begun_ns <= committed_ns <= consume.end_ns
        batched.append(begun["messaging.batch.message_count"])
    assert sum(count > 1 for count in batched) >= 2, f"no two calls shared a transaction: {batched}"
    # What each call published stays in its own trace: its result carries its span's context.
    for tool_call_id, consume in consumes.items():
        [answer] = results.deliveries_with(correlation_id=tool_call_id)
        traceparent = str(answer.headers["traceparent"]).split("-")
        assert traceparent[1:3] == [consume.trace_id, consume.span_id]


def _acked(spans: Sequence[ReceivedSpan], ids: set[str]) -> list[ReceivedSpan]:
    """The calls' CONSUMER spans that say their delivery was acked."""
    return [
        span
        for span in spans
        if span.attributes.get("messaging.message.conversation_id") in ids
        and span.name.startswith("process ")
        and span.attributes.get("ltm.delivery.settlement") == "ack"
    ]


async def test_a_late_publish_by_the_sweep_still_belongs_to_the_call(
    services: TestServices,
    channel: AbstractChannel,
    topology: Topology,
    world: World,
    receiver: OtlpReceiver,
    bot_tracing: TracerProvider,
    tmp_path: Path,
) -> None:
    persona = await world.persona(await world.server())
    memory_id = await world.server_memory(persona, "{user} bakes bread")
    triggerer = snowflake()
    call = tool_call(
        persona,
        {"memory_id": memory_id, "memory_content": "{user} bakes sourdough"},
        triggerer_id=triggerer,
        participants=(participant(triggerer, "Bob"),),
    )
    # The first worker dies right after the commit: its rows wait in the outbox.
    with _worker(services, receiver, tmp_path, "crashing", LTM_FAILPOINTS="after_commit") as first:
        await first.wait_ready_async()
        await _publish_traced(channel, topology, call)
        assert first.wait_exit(timeout=20) != 0
    [publish] = receiver.spans(
        lambda span: (
            span.service == "test-bot"
            and span.attributes.get("messaging.message.conversation_id") == call.tool_call_id
        )
    )
    rows = await world.outbox_of_call(call.tool_call_id)
    assert len(rows) == 4 and all(row["published_at"] is None for row in rows)
    [traceparent] = {row["traceparent"] for row in rows}
    _, trace_id, made_in, _ = traceparent.split("-")
    assert trace_id == publish.trace_id  # the dead worker's span of the call

    with _worker(services, receiver, tmp_path, "successor") as successor:
        await successor.wait_ready_async()
        event_ids = {str(row["event_id"]) for row in rows}

        def swept(spans: list[ReceivedSpan]) -> bool:
            sent = {
                span.attributes.get("messaging.message.id")
                for span in spans
                if span.name == f"send {topology.events_exchange}"
            }
            return event_ids <= sent

        spans = await receiver.wait_for(swept, timeout=30, what="the sweep's publishes")

    late = [
        span
        for span in spans
        if span.name == f"send {topology.events_exchange}"
        and span.attributes.get("messaging.message.id") in event_ids
    ]
    assert {span.service for span in late} == {"ltm-worker"}
    assert {(span.trace_id, span.parent_span_id) for span in late} == {(trace_id, made_in)}
    assert {span.attributes[_ROUTING_KEY] for span in late} >= {
        result_routing_key(0),
        "embed.shard.0",
    }


async def test_a_replayed_dead_letter_starts_a_trace_linked_to_the_original(
    services: TestServices,
    channel: AbstractChannel,
    topology: Topology,
    receiver: OtlpReceiver,
    bot_tracing: TracerProvider,
    tmp_path: Path,
) -> None:
    event_id = str(uuid.uuid4())
    tool_call_id = f"undecodable-{uuid.uuid4()}"
    exchange = await channel.get_exchange(topology.tool_calls_exchange, ensure=False)
    headers: aio_pika.abc.HeadersType = {"schema_version": 1}
    with tracing.sending(
        exchange=exchange.name,
        routing_key="update_long_term_memory",
        message_id=event_id,
        conversation_id=tool_call_id,
        headers=headers,
        parent=None,
    ):
        await exchange.publish(
            aio_pika.Message(
                b"not a tool call",
                message_id=event_id,
                correlation_id=tool_call_id,
                headers=headers,
                delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
            ),
            routing_key="update_long_term_memory",
        )
    dead_letter = f"send {topology.dead_letter_exchange}"

    def dead_lettered(times: int) -> Callable[[list[ReceivedSpan]], bool]:
        """Dead-lettered `times`, each delivery's span in (it ends after its dead-lettering)."""

        def enough(spans: list[ReceivedSpan]) -> bool:
            mine = {"messaging.message.id": event_id}
            return (
                len(_named(spans, dead_letter, **mine)) >= times
                and len(_named(spans, f"process {topology.tool_calls_exchange}", **mine)) >= times
            )

        return enough

    with _worker(services, receiver, tmp_path, "worker") as worker:
        await worker.wait_ready_async()
        spans = await receiver.wait_for(dead_lettered(1), what="the dead-lettering")
        [original] = _named(spans, dead_letter, **{"messaging.message.id": event_id})
        [first] = _named(
            spans, f"process {topology.tool_calls_exchange}", **{"messaging.message.id": event_id}
        )
        replay = LtmProcess(
            services,
            ("dlq", "replay", "--id", event_id),
            tmp_path / "replay.log",
            env=receiver.env("ltm-dlq"),
        )
        with replay:
            assert replay.wait_exit(timeout=30) == 0, replay.output()
        spans = await receiver.wait_for(dead_lettered(2), what="the replay dead-lettered again")

    assert first.attributes["error.type"] == "invalid_envelope"
    assert original.trace_id == first.trace_id and original.parent_span_id == first.span_id
    [replayed] = [
        span
        for span in spans
        if span.service == "ltm-dlq" and span.attributes.get("messaging.message.id") == event_id
    ]
    assert replayed.name == f"send {topology.tool_calls_exchange}"
    assert replayed.is_root and replayed.trace_id != original.trace_id
    assert replayed.links == ((original.trace_id, original.span_id),)
    # The worker carries on in the replay's trace.
    [again] = [
        span
        for span in _named(spans, f"process {topology.tool_calls_exchange}")
        if span.attributes.get("messaging.message.id") == event_id and span.span_id != first.span_id
    ]
    assert (again.trace_id, again.parent_span_id) == (replayed.trace_id, replayed.span_id)
