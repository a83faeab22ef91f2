"""`ltm audit tail` against the real broker's audit stream."""

from __future__ import annotations

import asyncio
import io
import json
import time
import uuid
from datetime import timedelta

import aio_pika
import pytest
from aio_pika.abc import AbstractChannel, AbstractConnection

from contracts import (
    MemoryUpdated,
    Topology,
    amqp_properties,
    audit_routing_key,
    encode_event,
    utc_now,
)
from harness.broker import publish_raw
from harness.waiting import eventually
from harness.world import World
from infra.settings import Settings
from ltm.commands.audit import tail_audit
from operators.audit_stream import parse_start
from operators.display import shown_time
from tests.integration.operators.seeding import (
    clock_passes,
    memory_updated,
    publish_event,
    revision_row,
)

# Generous: a tail that did not stop on its own fails here instead of hanging the run.
TAIL_DEADLINE_S = 30.0


@pytest.fixture
def world(ops_settings: Settings) -> World:
    return World(ops_settings.database_url)


async def _publish(
    channel: AbstractChannel, topology: Topology, world: World, *names: str
) -> list[MemoryUpdated]:
    """Events of changes whose revisions hold "<name> before" and "<name> after"."""
    events = []
    for memory_id, name in enumerate(names, start=1):
        revision_id = await revision_row(
            world, f"tc-{name}", memory_id, f"{name} before", f"{name} after"
        )
        events.append(memory_updated(f"tc-{name}", memory_id, revision_id))
    for event in events:
        await publish_event(channel, topology, event)
    return events


async def _tail(settings: Settings, start: str, *, as_json: bool = False) -> list[str]:
    out, err = io.StringIO(), io.StringIO()
    code = await asyncio.wait_for(
        tail_audit(
            settings,
            parse_start(start),
            as_json=as_json,
            out=out,
            err=err,
            stop=asyncio.Event(),
        ),
        TAIL_DEADLINE_S,
    )
    assert code == 0, err.getvalue()
    return out.getvalue().splitlines()


async def test_tail_from_first_prints_every_event_in_order(
    ops_settings: Settings, channel: AbstractChannel, topology: Topology, world: World
) -> None:
    events = await _publish(channel, topology, world, "a", "b", "c")

    header, *lines = await _tail(ops_settings, "first")

    assert header.split() == ["TIME", "EVENT", "MEMORY", "REVISION", "TOOL", "CALL", "DETAILS"]
    assert len(lines) == 3
    for line, event in zip(lines, events, strict=True):
        when, kind, memory, revision, tool_call, *_ = line.split()
        assert when == shown_time(event.occurred_at, "milliseconds")
        assert kind == "memory.updated"
        assert (memory, revision) == (str(event.memory_id), str(event.revision_id))
        assert tool_call == event.tool_call_id
        name = event.tool_call_id.removeprefix("tc-")
        assert f"before: {name} before after: {name} after" in line
    # Labelled columns line up: each starts where its header does.
    for column in ("EVENT", "MEMORY", "REVISION", "TOOL CALL", "DETAILS"):
        start = header.index(column)
        assert all(line[start - 2 : start] == "  " and line[start] != " " for line in lines)


async def test_tail_as_json_prints_each_body_on_one_line(
    ops_settings: Settings, channel: AbstractChannel, topology: Topology, world: World
) -> None:
    events = await _publish(channel, topology, world, "a", "b", "c")

    lines = await _tail(ops_settings, "first", as_json=True)

    bodies = [json.loads(line) for line in lines]
    assert [body["event_id"] for body in bodies] == [str(event.event_id) for event in events]
    assert [MemoryUpdated.model_validate_json(line) for line in lines] == events
    # The stream's body, plus the texts of its revision.
    assert [(body["content_before"], body["content_after"], body["erased"]) for body in bodies] == [
        (f"{name} before", f"{name} after", False) for name in ("a", "b", "c")
    ]


async def test_tail_from_a_time_prints_only_later_events(
    ops_settings: Settings, channel: AbstractChannel, topology: Topology, world: World
) -> None:
    await _publish(channel, topology, world, "early1", "early2")
    boundary = utc_now()
    # The broker's timestamp offset is chunk- and second-grained: the early events may come
    # back from the stream, and the tail must drop them itself.
    await clock_passes(boundary + timedelta(milliseconds=5))
    later = await _publish(channel, topology, world, "late1", "late2")

    lines = await _tail(ops_settings, boundary.isoformat(), as_json=True)

    assert [json.loads(line)["tool_call_id"] for line in lines] == [
        event.tool_call_id for event in later
    ]


async def _publish_as_one_chunk(
    connection: AbstractConnection, topology: Topology, count: int
) -> None:
    """Events the stream stores together, as one chunk: the offset `last` starts at its
    first event."""
    channel = await connection.channel(publisher_confirms=False)
    exchange = await channel.get_exchange(topology.events_exchange, ensure=False)
    # Routed to the stream all at once, at the commit.
    async with channel.transaction():
        for n in range(1, count + 1):
            event = memory_updated(f"tc-chunk-{n}", n)
            await exchange.publish(
                aio_pika.Message(encode_event(event), **amqp_properties(event)),
                routing_key=audit_routing_key("updated", "server_wide"),
            )
    await channel.close()


async def test_tail_from_last_prints_the_newest_event_alone(
    ops_settings: Settings, connection: AbstractConnection, topology: Topology
) -> None:
    await _publish_as_one_chunk(connection, topology, 10)
    newest = json.loads((await _tail(ops_settings, "first", as_json=True))[-1])

    lines = await _tail(ops_settings, "last", as_json=True)

    assert [json.loads(line)["event_id"] for line in lines] == [newest["event_id"]]


async def test_tail_follow_from_last_prints_the_newest_event_then_new_ones(
    ops_settings: Settings,
    connection: AbstractConnection,
    channel: AbstractChannel,
    topology: Topology,
    world: World,
) -> None:
    await _publish_as_one_chunk(connection, topology, 10)
    newest = json.loads((await _tail(ops_settings, "first", as_json=True))[-1])
    out, stop = io.StringIO(), asyncio.Event()
    tail = asyncio.create_task(
        tail_audit(ops_settings, "last", follow=True, as_json=True, out=out, stop=stop)
    )

    async def printed(count: int) -> list[str] | None:
        lines = out.getvalue().splitlines()
        return lines if len(lines) >= count else None

    [first] = await eventually(lambda: printed(1), what="the newest event")
    (new,) = await _publish(channel, topology, world, "new")
    _, second = await eventually(lambda: printed(2), what="the new event")
    stop.set()

    assert await asyncio.wait_for(tail, TAIL_DEADLINE_S) == 0
    assert json.loads(first)["event_id"] == newest["event_id"]
    assert json.loads(second)["event_id"] == str(new.event_id)


async def test_tail_exits_on_its_own_once_caught_up(
    ops_settings: Settings, channel: AbstractChannel, topology: Topology, world: World
) -> None:
    await _publish(channel, topology, world, "a")
    started = time.monotonic()

    lines = await _tail(ops_settings, "first", as_json=True)

    assert len(lines) == 1
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("start", ["first", "last"])
async def test_tail_of_an_empty_stream_says_so_and_exits(
    ops_settings: Settings, topology: Topology, start: str
) -> None:
    assert await _tail(ops_settings, start) == [f"no events in {topology.audit_stream}"]
    assert await _tail(ops_settings, start, as_json=True) == []


async def test_tail_from_a_time_after_every_event_says_there_are_none(
    ops_settings: Settings, channel: AbstractChannel, topology: Topology, world: World
) -> None:
    await _publish(channel, topology, world, "old")
    start = utc_now()
    await clock_passes(start)

    lines = await _tail(ops_settings, start.isoformat())

    assert lines == [
        f"no events in {topology.audit_stream} at or after "
        f"{start.isoformat(timespec='seconds').replace('+00:00', 'Z')}"
    ]
    assert await _tail(ops_settings, start.isoformat(), as_json=True) == []


async def test_follow_prints_new_events_until_stopped(
    ops_settings: Settings, channel: AbstractChannel, topology: Topology, world: World
) -> None:
    (old,) = await _publish(channel, topology, world, "old")
    out, stop = io.StringIO(), asyncio.Event()
    tail = asyncio.create_task(
        tail_audit(ops_settings, "first", follow=True, as_json=True, out=out, stop=stop)
    )

    async def printed(tool_call_id: str) -> bool:
        return f'"tool_call_id":"{tool_call_id}"' in out.getvalue()

    await eventually(lambda: printed(old.tool_call_id), what="the old event")
    (new,) = await _publish(channel, topology, world, "new")
    await eventually(lambda: printed(new.tool_call_id), what="the new event")
    stop.set()

    assert await asyncio.wait_for(tail, TAIL_DEADLINE_S) == 0


async def test_a_redacted_revision_shows_erased_and_json_has_null_texts(
    ops_settings: Settings, channel: AbstractChannel, topology: Topology, world: World
) -> None:
    # This branch's `memory_revisions` keeps its contents NOT NULL and its trigger refuses
    # every update: a redaction is made in a schema of the test's own, a copy of the table
    # without either, which the tail reads through its search_path.
    schema = f"redacted_{uuid.uuid4().hex[:12]}"
    await world.execute(f"CREATE SCHEMA {schema}")
    await world.execute(
        f"CREATE TABLE {schema}.memory_revisions (LIKE public.memory_revisions INCLUDING DEFAULTS)"
    )
    await world.execute(f"ALTER TABLE {schema}.memory_revisions ALTER content_before DROP NOT NULL")
    scratch = World(_with_search_path(ops_settings.database_url, schema))
    kept = await revision_row(scratch, "tc-kept", 1, "kept before", "kept after")
    erased = await revision_row(scratch, "tc-erased", 2, "gone before", "gone after")
    await scratch.execute(
        f"UPDATE {schema}.memory_revisions SET content_before = NULL, content_after = NULL"
        " WHERE revision_id = %s",
        erased,
    )
    for memory_id, revision_id in ((1, kept), (2, erased)):
        await publish_event(
            channel, topology, memory_updated(f"tc-{memory_id}", memory_id, revision_id)
        )
    reading = ops_settings.model_copy(
        update={"database_url": _with_search_path(ops_settings.database_url, schema)}
    )

    _, kept_line, erased_line = await _tail(reading, "first")
    bodies = [json.loads(line) for line in await _tail(reading, "first", as_json=True)]

    assert "before: kept before after: kept after" in kept_line
    assert "before: [erased] after: [erased]" in erased_line
    assert [(b["content_before"], b["content_after"], b["erased"]) for b in bodies] == [
        ("kept before", "kept after", False),
        (None, None, True),
    ]


async def test_a_version_1_event_with_texts_is_shown_with_its_revisions_texts_only(
    ops_settings: Settings, channel: AbstractChannel, topology: Topology, world: World
) -> None:
    revision_id = await revision_row(world, "tc-old", 5, "stored before", "stored after")
    current = memory_updated("tc-old", 5, revision_id)
    old_body = {
        **json.loads(encode_event(current)),
        "schema_version": 1,
        "content_before": "stream before",
        "content_after": "stream after",
    }
    properties = amqp_properties(current)
    properties["headers"] = {"schema_version": 1}
    await publish_raw(
        channel,
        topology.events_exchange,
        json.dumps(old_body).encode(),
        audit_routing_key("updated", "server_wide"),
        **properties,
    )

    _, line = await _tail(ops_settings, "first")
    [as_json] = await _tail(ops_settings, "first", as_json=True)

    assert "memory.updated" in line and "before: stored before after: stored after" in line
    assert "stream" not in line and "stream" not in as_json
    assert json.loads(as_json)["content_before"] == "stored before"


def _with_search_path(url: str, schema: str) -> str:
    separator = "&" if "?" in url else "?"
    return f"{url}{separator}options=-csearch_path%3D{schema},public"
