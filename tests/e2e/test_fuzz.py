"""Fuzzing the real worker through the broker: any arguments are answered, any bad body is
dead-lettered with a reason, and nothing is left stuck in the work queue.

The worker runs under a prefix of this module's own, so that its dead-letter queue and work
queue hold only what these tests publish.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from aio_pika.abc import AbstractChannel
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from contracts import (
    InvalidEnvelope,
    MemoryStatus,
    ToolCallCompleted,
    ToolCallContext,
    ToolCallRequested,
    Topology,
    decode_tool_call,
    encode_event,
)
from harness.broker import (
    Delivery,
    EventTap,
    own_topology,
    publish_raw,
    publish_tool_call,
    queue_depth,
    tap_events,
)
from harness.processes import LtmProcess
from harness.services import TestServices
from harness.waiting import eventually
from harness.world import Persona, World, participant, tool_call
from infra.settings import Settings
from tests.support.fuzzing import JSON, MAX_MEMORY_ID, TRICKY_TEXT, fresh_id

TOOL = "update_long_term_memory"
FUZZ_SETTINGS = settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@dataclass(frozen=True)
class Fuzzing:
    """The module's broker setup: its topology, a channel, and taps on what comes out."""

    settings: Settings
    topology: Topology
    channel: AbstractChannel
    results: EventTap
    dead: EventTap


@pytest.fixture(scope="module")
async def fuzzing(settings: Settings) -> AsyncIterator[Fuzzing]:
    async with (
        own_topology(settings, "fuzz", publisher_confirms=True) as (own, topology, channel),
        tap_events(channel, topology.events_exchange, ["result.#"]) as results,
        tap_events(channel, topology.dead_letter_exchange) as dead,
    ):
        yield Fuzzing(own, topology, channel, results, dead)


@pytest.fixture(scope="module")
def fuzz_worker(
    fuzzing: Fuzzing, services: TestServices, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LtmProcess]:
    log = tmp_path_factory.mktemp("fuzz-worker") / "worker.log"
    env = {"LTM_AMQP_PREFIX": fuzzing.settings.amqp_prefix, "LTM_DB_RETRY_SECONDS": "2"}
    with LtmProcess(services, ("worker",), log, env=env) as process:
        process.wait_ready()
        yield process


@dataclass(frozen=True)
class Scene:
    persona: Persona
    triggerer: str
    memory_ids: tuple[int, ...]
    names: tuple[str, ...]


@pytest.fixture(scope="module")
async def scene(world: World) -> Scene:
    server = await world.server(fresh_id())
    persona = await world.persona(server)
    triggerer_user, triggerer = await world.user(fresh_id())
    await world.member(server, triggerer, "trig_t", display_name="Trig")
    alice_user, alice = await world.user(fresh_id())
    await world.member(server, alice, "alice_w", display_name="Alice")
    memory_ids = [await world.server_memory(persona, f"fact {n}") for n in range(6)]
    for owner in (triggerer_user, alice_user):
        memory_ids.append(await world.personal_memory(owner, persona.lineage, "personal"))
    return Scene(persona, triggerer, tuple(memory_ids), ("Alice", "Trig", "@alice", "nobody"))


def arguments(scene: Scene) -> st.SearchStrategy[Any]:
    ids = st.sampled_from(scene.memory_ids)
    name = st.sampled_from(scene.names) | st.text(max_size=20)
    plausible = st.fixed_dictionaries(
        {
            "memory_id": ids | ids.map(float) | st.integers(-3, MAX_MEMORY_ID + 3),
            "memory_content": st.one_of(
                st.text(),
                st.text(alphabet=st.characters(max_codepoint=0x1F), max_size=5),  # controls
                st.sampled_from(TRICKY_TEXT),
                st.sampled_from(["", "{user} and {alice}", " "]),
            ),
        },
        optional={"target_user": st.none() | name | JSON},
    )
    return st.one_of(JSON, plausible, plausible)


async def answers(fuzzing: Fuzzing, tool_call_ids: list[str]) -> dict[str, ToolCallCompleted]:
    async def all_answered() -> dict[str, ToolCallCompleted] | None:
        found = {
            result.tool_call_id: result
            for result in fuzzing.results.events(ToolCallCompleted)
            if result.tool_call_id in tool_call_ids
        }
        return found if len(found) == len(tool_call_ids) else None

    return await eventually(all_answered, timeout=30, what="an answer to every call")


async def work_queue_empty(fuzzing: Fuzzing) -> None:
    async def empty() -> bool:
        return await queue_depth(fuzzing.channel, fuzzing.topology.worker_queue) == 0

    await eventually(empty, timeout=30, what="the work queue empty")


def fuzz_call(scene: Scene, arguments: Any) -> ToolCallRequested:
    return tool_call(
        scene.persona,
        arguments,
        triggerer_id=scene.triggerer,
        participants=(participant(scene.triggerer, "Trig"),),
        channel_id=fresh_id(),
        tool_call_id=f"fuzz-{uuid.uuid4()}",
    )


async def dead_lettered(fuzzing: Fuzzing, message_ids: list[str]) -> dict[str, Delivery]:
    """The dead-lettered copies of these messages, once all of them are there."""

    async def all_dead() -> dict[str, Delivery] | None:
        copies = {
            delivery.properties["message_id"]: delivery
            for delivery in fuzzing.dead.deliveries
            if delivery.properties["message_id"] in message_ids
        }
        return copies if len(copies) == len(message_ids) else None

    return await eventually(all_dead, timeout=30, what="every body dead-lettered")


async def publish_body(fuzzing: Fuzzing, body: bytes) -> str:
    """A raw body on the tool's routing key; returns its message id."""
    message_id = str(uuid.uuid4())
    await publish_raw(
        fuzzing.channel,
        fuzzing.topology.tool_calls_exchange,
        body,
        TOOL,
        message_id=message_id,
        content_type="application/json",
    )
    return message_id


# The checks that something did not happen wait first for a control published after the
# fuzzed input to come out the same way: by then, what the input caused has come out too.


async def control_dead_lettered(fuzzing: Fuzzing) -> None:
    await dead_lettered(fuzzing, [await publish_body(fuzzing, b"not a tool call")])


async def control_answered(fuzzing: Fuzzing, scene: Scene) -> str:
    control = fuzz_call(scene, {"memory_id": MAX_MEMORY_ID, "memory_content": "control"})
    await publish_tool_call(fuzzing.channel, fuzzing.topology, control)
    await answers(fuzzing, [control.tool_call_id])
    return control.tool_call_id


@settings(FUZZ_SETTINGS, max_examples=25)
@given(data=st.data())
async def test_random_arguments_through_the_worker_are_answered_and_recorded(
    fuzzing: Fuzzing, fuzz_worker: LtmProcess, scene: Scene, world: World, data: st.DataObject
) -> None:
    batch = data.draw(st.lists(arguments(scene), min_size=1, max_size=8), label="arguments")
    calls = [fuzz_call(scene, raw) for raw in batch]
    for call in calls:
        await publish_tool_call(fuzzing.channel, fuzzing.topology, call)

    found = await answers(fuzzing, [call.tool_call_id for call in calls])

    for call in calls:
        result = found[call.tool_call_id]
        event(result.status.value)
        assert result.success is result.status.success
        assert result.message.strip()
        # A sound scene and a database that is there: an answer the worker recorded.
        assert result.status not in (MemoryStatus.INTERNAL_ERROR, MemoryStatus.DB_ERROR), (
            call.arguments,
            result,
        )
        inbox = await world.inbox(call.tool_call_id)
        assert inbox is not None and inbox["status"] == result.status.value
    await control_dead_lettered(fuzzing)
    dead = {delivery.properties["correlation_id"] for delivery in fuzzing.dead.deliveries}
    assert not dead & {call.tool_call_id for call in calls}
    await work_queue_empty(fuzzing)


@pytest.mark.parametrize("text", TRICKY_TEXT, ids=ascii)
async def test_tricky_text_through_the_worker_is_answered_and_recorded(
    fuzzing: Fuzzing, fuzz_worker: LtmProcess, scene: Scene, world: World, text: str
) -> None:
    """The fuzzers' special characters, each once for certain, in an update of a live memory."""
    memory_id = await world.server_memory(scene.persona, "to be rewritten")
    call = fuzz_call(scene, {"memory_id": memory_id, "memory_content": text})
    await publish_tool_call(fuzzing.channel, fuzzing.topology, call)

    result = (await answers(fuzzing, [call.tool_call_id]))[call.tool_call_id]

    assert result.status not in (MemoryStatus.INTERNAL_ERROR, MemoryStatus.DB_ERROR), result
    inbox = await world.inbox(call.tool_call_id)
    assert inbox is not None and inbox["status"] == result.status.value
    if result.success:
        assert await world.content(memory_id) == result.data.content_saved
    else:
        assert await world.content(memory_id) == "to be rewritten"
    await work_queue_empty(fuzzing)


def valid_envelope() -> dict[str, Any]:
    call = ToolCallRequested(
        tool_call_id=f"fuzz-{uuid.uuid4()}",
        tool_name=TOOL,
        arguments={"memory_id": 1, "memory_content": "x"},
        context=ToolCallContext(
            guild_id=fresh_id(),
            channel_id=fresh_id(),
            triggerer_id=fresh_id(),
            bot_user_id=fresh_id(),
            persona_id=1,
            shard_id=0,
        ),
    )
    return dict(json.loads(encode_event(call)))


_ENVELOPE_KEYS = (
    "event_id",
    "event_type",
    "schema_version",
    "occurred_at",
    "tool_call_id",
    "tool_name",
    "context",
)
_CONTEXT_KEYS = ("guild_id", "channel_id", "triggerer_id", "bot_user_id", "persona_id", "shard_id")


@st.composite
def broken_envelopes(draw: st.DrawFn) -> bytes:
    """A tool call with one thing wrong: a field missing, of another type or value, an unknown
    schema version or event type, a tool nobody serves; or JSON that is no envelope at all."""
    body = valid_envelope()
    kind = draw(st.sampled_from(["drop", "replace", "context", "version", "tool", "any"]))
    if kind == "drop":
        del body[draw(st.sampled_from(_ENVELOPE_KEYS))]
    elif kind == "replace":
        body[draw(st.sampled_from(_ENVELOPE_KEYS))] = draw(JSON)
    elif kind == "context":
        key = draw(st.sampled_from(_CONTEXT_KEYS))
        if draw(st.booleans()):
            del body["context"][key]
        else:
            body["context"][key] = draw(JSON)
    elif kind == "version":
        body["schema_version"] = draw(st.integers().filter(lambda n: n != 1) | JSON)
    elif kind == "tool":
        body["tool_name"] = draw(st.text(max_size=30).filter(lambda name: name != TOOL))
    else:
        return json.dumps(draw(JSON)).encode()
    return json.dumps(body).encode()


def undecodable(body: bytes) -> bool:
    """What the worker cannot answer: not a tool call, or a tool it does not serve."""
    try:
        call = decode_tool_call(body)
    except InvalidEnvelope:
        return True
    return call.tool_name != TOOL


async def assert_dead_lettered(fuzzing: Fuzzing, scene: Scene, bodies: list[bytes]) -> None:
    """Each body dead-lettered with a reason, and none of them answered."""
    answered_before = {result.tool_call_id for result in fuzzing.results.events(ToolCallCompleted)}
    message_ids = [await publish_body(fuzzing, body) for body in bodies]

    copies = await dead_lettered(fuzzing, message_ids)
    for body, message_id in zip(bodies, message_ids, strict=True):
        copy = copies[message_id]
        reason = copy.headers.get("x-ltm-error")
        assert isinstance(reason, str) and reason.strip(), copy.headers
        assert copy.body == body
        assert copy.routing_key == TOOL
    control = await control_answered(fuzzing, scene)
    answered = {
        result.tool_call_id for result in fuzzing.results.events(ToolCallCompleted)
    } - answered_before
    # Only this module's answers: the worker's outbox sweep also publishes what earlier
    # modules left unpublished in the run's database.
    ours = {
        tool_call_id
        for tool_call_id in answered
        if tool_call_id.startswith("fuzz-") or tool_call_id in map(named_call, bodies)
    }
    assert ours == {control}, "a body that is no valid call was answered"
    await work_queue_empty(fuzzing)


def named_call(body: bytes) -> str | None:
    """The tool_call_id a body names, read leniently (None: no JSON object, or no string)."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return None
    named = parsed.get("tool_call_id") if isinstance(parsed, dict) else None
    return named if isinstance(named, str) else None


@settings(FUZZ_SETTINGS, max_examples=15)
@given(bodies=st.lists(st.binary(max_size=300), min_size=1, max_size=6))
async def test_random_bytes_are_dead_lettered_with_a_reason(
    fuzzing: Fuzzing, fuzz_worker: LtmProcess, scene: Scene, bodies: list[bytes]
) -> None:
    assume(all(undecodable(body) for body in bodies))
    await assert_dead_lettered(fuzzing, scene, bodies)


@settings(FUZZ_SETTINGS, max_examples=25)
@given(bodies=st.lists(broken_envelopes(), min_size=1, max_size=6))
async def test_json_that_is_not_a_valid_envelope_is_dead_lettered_with_a_reason(
    fuzzing: Fuzzing, fuzz_worker: LtmProcess, scene: Scene, bodies: list[bytes]
) -> None:
    assume(all(undecodable(body) for body in bodies))
    await assert_dead_lettered(fuzzing, scene, bodies)
