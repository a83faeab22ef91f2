"""`ltm dlq list|replay|purge` against the real broker."""

from __future__ import annotations

import asyncio
import io
import json
from dataclasses import dataclass
from datetime import datetime

import pytest
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractIncomingMessage

from contracts import UPDATE_LONG_TERM_MEMORY, ToolCallRequested, Topology
from harness.broker import queue_depth
from harness.waiting import eventually
from infra.settings import Settings
from ltm.commands.dlq import list_dead_letters, purge_dead_letters, replay_dead_letters
from operators.dead_letters import (
    DELIVERY_PATIENCE_S,
    inspect_dead_letters,
    take_deliveries,
)
from tests.integration.operators.seeding import (
    broker_dead_letter,
    tool_call,
    worker_dead_letter,
)


@dataclass(frozen=True)
class Seeded:
    invalid: ToolCallRequested  # dead-lettered by the worker: bad envelope
    crashed: ToolCallRequested  # dead-lettered by the worker: an exception
    exhausted: ToolCallRequested  # dead-lettered by the broker at the delivery limit

    @property
    def all(self) -> tuple[ToolCallRequested, ...]:
        return (self.invalid, self.crashed, self.exhausted)


@pytest.fixture
async def seeded(channel: AbstractChannel, topology: Topology) -> Seeded:
    seeded = Seeded(tool_call("tc-invalid"), tool_call("tc-crashed"), tool_call("tc-exhausted"))
    await worker_dead_letter(
        channel, topology, seeded.invalid, "invalid envelope: context: missing"
    )
    await worker_dead_letter(channel, topology, seeded.crashed, "RuntimeError('boom')")
    await broker_dead_letter(channel, topology, seeded.exhausted)
    await _wait_for_count(channel, topology.dead_letter_queue, 3)
    return seeded


async def _wait_for_count(channel: AbstractChannel, queue: str, expected: int) -> None:
    async def settled() -> bool:
        return await queue_depth(channel, queue) == expected

    await eventually(settled, what=f"{queue} to hold {expected} message(s)")


async def _drain(channel: AbstractChannel, queue_name: str) -> list[AbstractIncomingMessage]:
    queue = await channel.declare_queue(queue_name, passive=True)
    taken: list[AbstractIncomingMessage] = []
    while (message := await queue.get(no_ack=True, fail=False)) is not None:
        taken.append(message)
    return taken


async def test_list_shows_both_kinds_and_consumes_nothing(
    ops_settings: Settings, channel: AbstractChannel, topology: Topology, seeded: Seeded
) -> None:
    out, err = io.StringIO(), io.StringIO()

    assert await list_dead_letters(ops_settings, out=out, err=err) == 0

    header, *rows, summary = out.getvalue().splitlines()
    assert header.split() == [
        "EVENT", "ID", "TOOL", "CALL", "FAILED", "AT", "ATTEMPTS", "ROUTING", "KEY", "SOURCE",
        "REASON",
    ]  # fmt: skip
    by_call = {row.split()[1]: row for row in rows}
    assert set(by_call) == {call.tool_call_id for call in seeded.all}
    for call in seeded.all:
        assert by_call[call.tool_call_id].startswith(str(call.event_id))
    reason = header.index("REASON")
    assert by_call["tc-invalid"][reason:] == "invalid envelope: context: missing"
    assert by_call["tc-crashed"][reason:] == "RuntimeError('boom')"
    assert by_call["tc-exhausted"][reason:] == f"delivery_limit (queue {topology.worker_queue})"
    source = header.index("SOURCE")
    assert [by_call[call.tool_call_id][source:].split()[0] for call in seeded.all] == [
        "worker",
        "worker",
        "broker",
    ]
    assert summary == "3 dead-lettered message(s)"
    assert err.getvalue() == ""
    await _wait_for_count(channel, topology.dead_letter_queue, 3)


async def test_list_as_json_is_one_array_of_the_entries(
    ops_settings: Settings, channel: AbstractChannel, topology: Topology, seeded: Seeded
) -> None:
    out, err = io.StringIO(), io.StringIO()

    assert await list_dead_letters(ops_settings, as_json=True, out=out, err=err) == 0

    listed = {entry["tool_call_id"]: entry for entry in json.loads(out.getvalue())}
    assert set(listed) == {call.tool_call_id for call in seeded.all}
    crashed = listed[seeded.crashed.tool_call_id]
    assert crashed["event_id"] == str(seeded.crashed.event_id)
    assert (crashed["source"], crashed["reason"]) == ("worker", "RuntimeError('boom')")
    assert crashed["attempts"] == 3
    assert crashed["routing_key"] == UPDATE_LONG_TERM_MEMORY
    assert datetime.fromisoformat(crashed["failed_at"]).tzinfo is not None
    assert err.getvalue() == ""


async def test_list_of_an_empty_queue_says_so_or_prints_an_empty_array(
    ops_settings: Settings, topology: Topology
) -> None:
    text, as_json = io.StringIO(), io.StringIO()

    assert await list_dead_letters(ops_settings, out=text) == 0
    assert await list_dead_letters(ops_settings, as_json=True, out=as_json) == 0

    assert text.getvalue() == f"{topology.dead_letter_queue} is empty\n"
    assert json.loads(as_json.getvalue()) == []


async def test_inspect_returns_the_entries_as_data(
    ops_settings: Settings, channel: AbstractChannel, topology: Topology, seeded: Seeded
) -> None:
    entries, total = await inspect_dead_letters(ops_settings)

    assert total == 3
    by_call = {entry.tool_call_id: entry for entry in entries}
    assert set(by_call) == {call.tool_call_id for call in seeded.all}
    exhausted = by_call[seeded.exhausted.tool_call_id]
    assert exhausted.source == "broker"
    assert exhausted.reason.startswith("delivery_limit")
    assert exhausted.attempts == 6  # the first delivery and the limit's 5 redeliveries
    assert exhausted.failed_at is not None
    crashed = by_call[seeded.crashed.tool_call_id]
    assert crashed.source == "worker"
    assert crashed.reason == "RuntimeError('boom')"
    assert crashed.attempts == 3  # the work queue had delivered it twice before
    assert crashed.failed_at is not None
    for entry in entries:
        assert entry.routing_key == UPDATE_LONG_TERM_MEMORY
        assert entry.event_id in {str(call.event_id) for call in seeded.all}
    await _wait_for_count(channel, topology.dead_letter_queue, 3)


async def test_replay_by_id_moves_exactly_that_one_back_as_published(
    ops_settings: Settings, channel: AbstractChannel, topology: Topology, seeded: Seeded
) -> None:
    out, err = io.StringIO(), io.StringIO()
    event_id = str(seeded.exhausted.event_id)

    code = await replay_dead_letters(ops_settings, event_id, out=out, err=err)

    assert code == 0, err.getvalue()
    assert f"replayed {event_id}" in out.getvalue()
    await _wait_for_count(channel, topology.worker_queue, 1)
    (replayed,) = await _drain(channel, topology.worker_queue)
    assert replayed.routing_key == UPDATE_LONG_TERM_MEMORY
    assert replayed.exchange == topology.tool_calls_exchange
    assert replayed.body == seeded.exhausted.model_dump_json().encode()
    assert replayed.message_id == event_id
    assert replayed.correlation_id == seeded.exhausted.tool_call_id
    assert replayed.type == "tool_call.requested"
    assert replayed.content_type == "application/json"
    assert replayed.delivery_mode == 2
    assert replayed.timestamp is not None
    assert int(replayed.timestamp.timestamp()) == int(seeded.exhausted.occurred_at.timestamp())
    headers = dict(replayed.headers or {})
    headers.pop("x-delivery-count", None)  # the work queue's own, for this new delivery
    assert headers == {"schema_version": 1}

    await _wait_for_count(channel, topology.dead_letter_queue, 2)
    entries, _ = await inspect_dead_letters(ops_settings)
    assert {entry.event_id for entry in entries} == {
        str(seeded.invalid.event_id),
        str(seeded.crashed.event_id),
    }


async def test_replay_of_a_worker_dead_letter_drops_its_marks(
    ops_settings: Settings, channel: AbstractChannel, topology: Topology, seeded: Seeded
) -> None:
    code = await replay_dead_letters(ops_settings, str(seeded.crashed.event_id), out=io.StringIO())

    assert code == 0
    await _wait_for_count(channel, topology.worker_queue, 1)
    (replayed,) = await _drain(channel, topology.worker_queue)
    assert replayed.correlation_id == seeded.crashed.tool_call_id
    assert replayed.routing_key == UPDATE_LONG_TERM_MEMORY
    headers = dict(replayed.headers or {})
    assert not any(name.startswith("x-ltm-") for name in headers)
    # The stale work-queue count is gone: only the broker's count of this delivery remains.
    assert headers.get("x-delivery-count", 0) == 0


async def test_replay_of_an_unknown_id_fails_clearly_and_changes_nothing(
    ops_settings: Settings, channel: AbstractChannel, topology: Topology, seeded: Seeded
) -> None:
    out, err = io.StringIO(), io.StringIO()

    code = await replay_dead_letters(ops_settings, "no-such-event", out=out, err=err)

    assert code == 3
    assert "no dead-lettered message with event id no-such-event" in err.getvalue()
    await _wait_for_count(channel, topology.dead_letter_queue, 3)
    assert await queue_depth(channel, topology.worker_queue) == 0


async def test_an_unroutable_replay_stays_dead_lettered(
    ops_settings: Settings, channel: AbstractChannel, topology: Topology
) -> None:
    orphan = tool_call("tc-orphan")
    await worker_dead_letter(channel, topology, orphan, "no such tool", routing_key="no_such_tool")
    await _wait_for_count(channel, topology.dead_letter_queue, 1)
    err = io.StringIO()

    code = await replay_dead_letters(ops_settings, str(orphan.event_id), out=io.StringIO(), err=err)

    assert code == 1
    assert (
        f"could not replay {orphan.event_id}: the broker returned it: no queue is bound for "
        "routing key no_such_tool; it stays dead-lettered"
    ) in err.getvalue()
    await _wait_for_count(channel, topology.dead_letter_queue, 1)


async def test_replay_all_sends_every_one_back(
    ops_settings: Settings, channel: AbstractChannel, topology: Topology, seeded: Seeded
) -> None:
    out = io.StringIO()

    assert await replay_dead_letters(ops_settings, None, reason="fixed", out=out) == 0

    assert out.getvalue().splitlines()[-1] == "replayed 3 of 3 dead-lettered message(s)"
    await _wait_for_count(channel, topology.worker_queue, 3)
    await _wait_for_count(channel, topology.dead_letter_queue, 0)
    replayed = await _drain(channel, topology.worker_queue)
    assert {message.message_id for message in replayed} == {
        str(call.event_id) for call in seeded.all
    }
    assert {message.routing_key for message in replayed} == {UPDATE_LONG_TERM_MEMORY}


async def test_replay_all_as_json_is_one_document_of_what_went_back(
    ops_settings: Settings, channel: AbstractChannel, topology: Topology, seeded: Seeded
) -> None:
    out, err = io.StringIO(), io.StringIO()

    code = await replay_dead_letters(
        ops_settings, None, reason="fixed", as_json=True, out=out, err=err
    )
    assert code == 0

    report = json.loads(out.getvalue())
    assert {entry["event_id"] for entry in report["replayed"]} == {
        str(call.event_id) for call in seeded.all
    }
    assert (report["failed"], report["not_reached"]) == ([], 0)
    assert err.getvalue() == "replayed 3 of 3 dead-lettered message(s)\n"
    await _wait_for_count(channel, topology.dead_letter_queue, 0)


async def test_purge_with_yes_empties_the_queue(
    ops_settings: Settings, channel: AbstractChannel, topology: Topology, seeded: Seeded
) -> None:
    out = io.StringIO()

    assert await purge_dead_letters(ops_settings, yes=True, out=out) == 0

    assert "removed 3 dead-lettered message(s)" in out.getvalue()
    await _wait_for_count(channel, topology.dead_letter_queue, 0)


async def test_purge_as_json_prints_the_count_alone_on_stdout(
    ops_settings: Settings, channel: AbstractChannel, topology: Topology, seeded: Seeded
) -> None:
    out, err = io.StringIO(), io.StringIO()

    assert await purge_dead_letters(ops_settings, yes=True, as_json=True, out=out, err=err) == 0

    assert json.loads(out.getvalue()) == {"removed": 3}
    assert "removed 3" in err.getvalue()
    await _wait_for_count(channel, topology.dead_letter_queue, 0)


@pytest.mark.parametrize("answer", ["n\n", ""], ids=["no", "stdin closed"])
async def test_purge_not_answered_yes_keeps_everything_and_exits_1(
    ops_settings: Settings,
    channel: AbstractChannel,
    topology: Topology,
    seeded: Seeded,
    answer: str,
) -> None:
    out = io.StringIO()

    code = await purge_dead_letters(ops_settings, out=out, stdin=io.StringIO(answer))

    assert code == 1
    assert "remove 3 dead-lettered message(s)" in out.getvalue()
    assert "nothing removed (answer y, or pass --yes)" in out.getvalue()
    await _wait_for_count(channel, topology.dead_letter_queue, 3)


async def test_purge_answered_yes_empties_the_queue(
    ops_settings: Settings, channel: AbstractChannel, topology: Topology, seeded: Seeded
) -> None:
    out = io.StringIO()

    assert await purge_dead_letters(ops_settings, out=out, stdin=io.StringIO("y\n")) == 0

    assert "removed 3" in out.getvalue()
    await _wait_for_count(channel, topology.dead_letter_queue, 0)


async def test_taking_waits_out_a_full_window_while_acks_are_due(
    connection: AbstractConnection, topology: Topology, seeded: Seeded
) -> None:
    # `replay --all` takes a window of copies, then waits for their replays' confirms before
    # it acks them and more come: slow confirms must not read as an empty queue.
    own = await connection.channel()
    queue = await own.declare_queue(topology.dead_letter_queue, passive=True)
    acking: list[asyncio.Task[None]] = []

    async def ack_after_the_patience(message: AbstractIncomingMessage) -> None:
        await asyncio.sleep(DELIVERY_PATIENCE_S + 0.5)
        await message.ack()

    def acks_due() -> bool:
        return any(not task.done() for task in acking)

    async for message in take_deliveries(queue, 2, prefetch=1, waiting_for_acks=acks_due):
        acking.append(asyncio.create_task(ack_after_the_patience(message)))
    await asyncio.gather(*acking)
    assert len(acking) == 2
    await own.close()
