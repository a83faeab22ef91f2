"""Bad input stays bounded (docs/security.md): a body too large is dead-lettered unparsed; nesting,
participants and aliases over their bounds make an invalid envelope; the worker's memory stays
flat while a stream of such messages arrives."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from aio_pika.abc import AbstractChannel

from contracts import ToolCallCompleted, Topology, amqp_properties, encode_event
from contracts.codec import MAX_NESTING
from contracts.tool_calls import MAX_ALIASES, MAX_PARTICIPANTS
from harness.broker import own_topology, publish_raw, queue_depth, tap_events
from harness.processes import LtmProcess
from harness.services import TestServices
from harness.snowflake import snowflake
from harness.waiting import eventually
from harness.world import Persona, World, tool_call
from infra.settings import Settings
from tests.e2e.conftest import new_worker

MAX_BYTES = 65_536


@pytest.fixture(scope="module")
async def bounded(
    settings: Settings, services: TestServices, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[Topology, AbstractChannel, LtmProcess]]:
    """A worker of its own, on a topology of its own, taking bodies up to 64 KiB, 16 at a time:
    what the deliveries in flight hold (at most prefetch × the largest body) is bounded by the
    settings; with 256 its high-water mark wanders by ±15 % from run to run, and hides what
    the stream itself leaves behind."""
    async with own_topology(settings, "bounds", publisher_confirms=True) as (own, topology, ch):
        folder = tmp_path_factory.mktemp("bounded")
        with new_worker(
            services,
            folder,
            "bounded",
            LTM_AMQP_PREFIX=own.amqp_prefix,
            LTM_MAX_MESSAGE_BYTES=str(MAX_BYTES),
            LTM_PREFETCH="16",
        ) as worker:
            await worker.wait_ready_async()
            yield topology, ch, worker


async def _persona(world: World) -> Persona:
    return await world.persona(await world.server())


def _body(call: Any, **replace: Any) -> bytes:
    body = orjson.loads(encode_event(call))
    body.update(replace)
    return orjson.dumps(body)


def _nested(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth - 1):  # the arguments object is one level, the call itself another
        value = [value]
    return value


async def _dead_letter_reason(
    channel: AbstractChannel, topology: Topology, body: bytes, call: Any
) -> str:
    properties = amqp_properties(call)
    async with tap_events(channel, topology.dead_letter_exchange) as dead:
        await publish_raw(channel, topology.tool_calls_exchange, body, call.tool_name, **properties)
        [copy] = await dead.wait_for_delivery(message_id=str(call.event_id))
    assert copy.body == body  # as it came, whatever it holds
    return str(copy.headers["x-ltm-error"])


async def _answered(channel: AbstractChannel, topology: Topology, body: bytes, call: Any) -> Any:
    async with tap_events(channel, topology.events_exchange, ["result.#"]) as tap:
        await publish_raw(
            channel, topology.tool_calls_exchange, body, call.tool_name, **amqp_properties(call)
        )
        [result] = await tap.wait_for(ToolCallCompleted, tool_call_id=call.tool_call_id)
    return result


async def test_a_body_over_the_limit_is_dead_lettered_unparsed(
    bounded: tuple[Topology, AbstractChannel, LtmProcess], world: World
) -> None:
    topology, channel, _ = bounded
    persona = await _persona(world)
    memory_id = await world.server_memory(persona, "likes tea")
    call = tool_call(
        persona,
        {"memory_id": memory_id, "memory_content": "x", "padding": "p" * MAX_BYTES},
        triggerer_id=snowflake(),
    )
    body = encode_event(call)
    assert len(body) > MAX_BYTES
    reason = await _dead_letter_reason(channel, topology, body, call)
    assert reason == f"too large: {len(body)} bytes, over LTM_MAX_MESSAGE_BYTES ({MAX_BYTES})"
    assert await world.inbox(call.tool_call_id) is None
    assert await world.content(memory_id) == "likes tea"


async def test_a_body_at_the_limit_is_read(
    bounded: tuple[Topology, AbstractChannel, LtmProcess], world: World
) -> None:
    topology, channel, _ = bounded
    persona = await _persona(world)
    call = tool_call(persona, {"memory_id": 1}, triggerer_id=snowflake())
    fields = orjson.loads(encode_event(call))
    fields["padding"] = ""
    fields["padding"] = "p" * (MAX_BYTES - len(orjson.dumps(fields)))
    body = orjson.dumps(fields)
    assert len(body) == MAX_BYTES
    result = await _answered(channel, topology, body, call)
    assert result.status.value == "memory_update_failed_invalid_args"


@pytest.mark.parametrize(
    ("what", "shape", "reason"),
    [
        ("nesting", "deep", f"JSON nested {MAX_NESTING + 1} levels deep, more than {MAX_NESTING}"),
        ("participants", "many participants", "context.participants"),
        ("aliases", "many aliases", "aliases"),
    ],
)
async def test_over_a_bound_is_an_invalid_envelope(
    bounded: tuple[Topology, AbstractChannel, LtmProcess],
    world: World,
    what: str,
    shape: str,
    reason: str,
) -> None:
    topology, channel, _ = bounded
    persona = await _persona(world)
    over, body = _shaped(persona, shape, over=True)
    got = await _dead_letter_reason(channel, topology, body, over)
    assert got.startswith("invalid envelope") and reason in got, got
    assert await world.inbox(over.tool_call_id) is None
    # At the bound it is a call like any other: read and answered.
    within, body = _shaped(persona, shape, over=False)
    result = await _answered(channel, topology, body, within)
    assert result.tool_call_id == within.tool_call_id, what


def _shaped(persona: Persona, shape: str, *, over: bool) -> tuple[Any, bytes]:
    """A call at a bound, or one over it (built as JSON: the models refuse to build it)."""
    extra = 1 if over else 0
    triggerer = snowflake()
    if shape == "deep":
        # The body is the outermost level, `arguments` the second.
        call = tool_call(
            persona, {"memory_id": _nested(MAX_NESTING - 1 + extra)}, triggerer_id=triggerer
        )
        return call, encode_event(call)
    call = tool_call(persona, {"memory_id": 1}, triggerer_id=triggerer)
    fields = orjson.loads(encode_event(call))
    if shape == "many participants":
        people = [_person(snowflake(), ["p"]) for _ in range(MAX_PARTICIPANTS + extra)]
    else:
        people = [_person(triggerer, [f"alias {n}" for n in range(MAX_ALIASES + extra)])]
    fields["context"]["participants"] = people
    return call, orjson.dumps(fields)


def _person(user_id: str, aliases: list[str]) -> dict[str, Any]:
    return {"user_id": user_id, "display_label": aliases[0], "aliases": aliases}


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


async def test_the_workers_memory_stays_flat_under_a_stream_of_bad_input(
    bounded: tuple[Topology, AbstractChannel, LtmProcess], world: World
) -> None:
    topology, channel, worker = bounded
    persona = await _persona(world)
    # Each kind at the worst the bounds let through to the parser, and all dead-lettered: just
    # over the size; as deep as the size allows; a participant too many; an alias too many
    # for each of a crowd.
    deep = b'{"a":' + b"[" * 30_000 + b"]" * 30_000 + b"}"
    call = orjson.loads(encode_event(tool_call(persona, {}, triggerer_id=snowflake())))
    crowd = [_person(snowflake(), ["p"]) for _ in range(MAX_PARTICIPANTS + 1)]
    aliased = [
        _person(snowflake(), [f"a{n}-{m}" for m in range(MAX_ALIASES + 1)]) for n in range(100)
    ]
    bodies = [
        b"x" * (MAX_BYTES + 1),
        deep,
        orjson.dumps({**call, "context": {**call["context"], "participants": crowd}}),
        orjson.dumps({**call, "context": {**call["context"], "participants": aliased}}),
    ]
    assert all(len(body) > MAX_BYTES // 2 for body in bodies[1:]), [len(b) for b in bodies]
    assert all(len(body) <= MAX_BYTES for body in bodies[1:])

    async def stream(count: int) -> None:
        for n in range(count):
            await publish_raw(
                channel,
                topology.tool_calls_exchange,
                bodies[n % len(bodies)],
                "update_long_term_memory",
                message_id=str(uuid.uuid4()),
            )

        async def all_dead_lettered() -> bool:
            return await queue_depth(channel, topology.dead_letter_queue) >= count

        await eventually(all_dead_lettered, timeout=120, what=f"{count} dead letters")
        await (await channel.declare_queue(topology.dead_letter_queue, passive=True)).purge()

    # Warm-up: buffers, the prefetch window and the allocator's arenas at their size
    # (measured: flat from the first 500 on, within ±0.2 %).
    await stream(500)
    warm = _rss_kib(worker.pid)
    await stream(1500)
    after = _rss_kib(worker.pid)
    assert after / warm < 1.05, f"RSS {warm} KiB after warm-up, {after} KiB after 1500 more"
