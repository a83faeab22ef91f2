"""Data requests through the real worker and broker: an erasure proven on every store (a dump
of the whole database, every dead letter read back), its idempotent repeat, refusals that
change nothing, an export, creations racing an erasure on two workers, and the worker killed
at each step of an erasure (docs/data-rights.md)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aio_pika
import pytest
from aio_pika.abc import AbstractChannel

from contracts import (
    CREATE_LONG_TERM_MEMORY,
    DATA_REQUEST_ROUTING_KEY,
    DataRequestCompleted,
    DataRequestRequested,
    MemoryStatus,
    NoticeRetract,
    SubjectErased,
    ToolCallCompleted,
    ToolCallRequested,
    Topology,
    amqp_properties,
    encode_event,
)
from harness.broker import EventTap, own_topology, publish_raw, publish_tool_call, tap_events
from harness.processes import LtmProcess
from harness.services import TestServices
from harness.snowflake import snowflake
from harness.world import Persona, World, participant, tool_call
from infra.settings import Settings
from operators.dead_letters import read_dead_letters
from tests.e2e.conftest import new_worker
from tests.support.commands import run_ltm

SHARD = 5
NOTICE_SHARD = 3


@dataclass(frozen=True)
class Broker:
    settings: Settings
    topology: Topology
    channel: AbstractChannel


@pytest.fixture
async def broker(settings: Settings) -> AsyncIterator[Broker]:
    """A topology of the test's own: its dead-letter queue holds only what the test put."""
    async with own_topology(settings, "rights", publisher_confirms=True) as (own, t, channel):
        yield Broker(own, t, channel)


def worker(services: TestServices, tmp: Path, broker: Broker, name: str, **env: str) -> LtmProcess:
    return new_worker(
        services,
        tmp,
        name,
        LTM_AMQP_PREFIX=broker.settings.amqp_prefix,
        LTM_DB_RETRY_SECONDS="2",
        LTM_OUTBOX_SWEEP_INTERVAL_S="0.2",
        **env,
    )


def request(
    kind: str,
    subject: dict[str, str],
    by_kind: str,
    by_id: str,
    *,
    strict: bool = False,
    shard_id: int = SHARD,
    request_id: str | None = None,
) -> DataRequestRequested:
    return DataRequestRequested.model_validate(
        {
            "request_id": request_id or f"req-{uuid.uuid4()}",
            "kind": kind,
            "subject": subject,
            "requested_by": {"kind": by_kind, "id": by_id},
            "strict": strict,
            "context": {"shard_id": shard_id, "channel_id": snowflake()},
        }
    )


async def publish_request(
    broker: Broker, data_request: DataRequestRequested, *, user_id: str | None = None
) -> None:
    exchange = await broker.channel.get_exchange(broker.topology.tool_calls_exchange, ensure=False)
    message = aio_pika.Message(
        encode_event(data_request), **amqp_properties(data_request), user_id=user_id
    )
    await exchange.publish(message, routing_key=DATA_REQUEST_ROUTING_KEY)


async def answer_of(tap: EventTap, data_request: DataRequestRequested) -> DataRequestCompleted:
    """The first answer (a crash after its publish answers it again)."""
    answers = await tap.wait_for(
        DataRequestCompleted, request_id=data_request.request_id, timeout=30
    )
    return answers[0]  # type: ignore[no-any-return]


@dataclass
class Planted:
    persona: Persona
    alice: str
    bob: str
    marks: dict[str, str]  # name -> text; "alice_…" are Alice's
    calls: list[ToolCallRequested]


def _create(
    persona: Persona, triggerer: str, content: str, *, about: tuple[str, str] | None = None
) -> ToolCallRequested:
    arguments: dict[str, Any] = {"memory_content": content, "memory_scope": "server_wide"}
    participants = [participant(triggerer, "Trig")]
    if about is not None:
        arguments = {"memory_content": content, "memory_scope": "target_user",
                     "target_user": about[1]}  # fmt: skip
        participants.append(participant(about[0], about[1]))
    return tool_call(
        persona,
        arguments,
        triggerer_id=triggerer,
        participants=tuple(participants),
        tool_name=CREATE_LONG_TERM_MEMORY,
        shard_id=SHARD,
    )


async def plant(world: World, broker: Broker, tap: EventTap) -> Planted:
    """Alice's and Bob's texts in memories, revisions, results, the outbox and dead letters."""
    server = await world.server()
    persona = await world.persona(server)
    triggerer = snowflake()
    _, alice = await world.user(nickname="AliceNick")
    _, bob = await world.user(nickname="BobNick")
    await world.user(triggerer)
    for disc_id, name in ((alice, "alice_w"), (bob, "bob_w"), (triggerer, "trig_w")):
        await world.member(server, disc_id, name)
    mark = uuid.uuid4().hex[:10]
    marks = {
        "alice_personal": f"alice-cat-{mark}",
        "alice_taught": f"alice-taught-{mark}",
        "alice_letter": f"alice-letter-{mark}",
        "alice_raw": f"alice-raw-{mark}",
        "bob_personal": f"bob-dog-{mark}",
        "bob_letter": f"bob-letter-{mark}",
        "bob_raw": f"bob-raw-{mark}",
    }
    calls = [
        _create(persona, triggerer, marks["alice_personal"], about=(alice, "Alice")),
        _create(persona, alice, marks["alice_taught"]),
        _create(persona, triggerer, marks["bob_personal"], about=(bob, "Bob")),
    ]
    for call in calls:
        await publish_tool_call(broker.channel, broker.topology, call)
    memory_ids = []
    for call in calls:
        [result] = await tap.wait_for(ToolCallCompleted, tool_call_id=call.tool_call_id)
        assert result.status is MemoryStatus.SAVED
        memory_ids.append(result.data.memory_id)
    # The notices a gateway posted about Alice's memory and Bob's.
    for memory_id, owner in ((memory_ids[0], alice), (memory_ids[2], bob)):
        await world.execute(
            "INSERT INTO posted_notices (event_id, shard_id, channel_id, message_id, memory_id,"
            " scope, owner_disc_id, guild_id) VALUES (%s, %s, '5001', %s, %s, 'target_user',"
            " %s, %s)",
            uuid.uuid4(),
            NOTICE_SHARD,
            str(memory_id),
            memory_id,
            owner,
            server.disc_id,
        )
    # Dead letters: a call Alice triggered, one of Bob's, and two bodies no JSON parser takes.
    dead = broker.topology.dead_letter_exchange
    for letter in (
        _create(persona, alice, marks["alice_letter"]),
        _create(persona, bob, marks["bob_letter"]),
    ):
        await publish_raw(broker.channel, dead, encode_event(letter), CREATE_LONG_TERM_MEMORY,
                          headers={"x-ltm-error": "planted"}, correlation_id=letter.tool_call_id,
                          type="tool_call.requested")  # fmt: skip
    await publish_raw(broker.channel, dead, f"<{alice} {marks['alice_raw']}".encode(), "x")
    await publish_raw(broker.channel, dead, f"<{bob} {marks['bob_raw']}".encode(), "x")
    return Planted(persona, alice, bob, marks, calls)


def database_dump(settings: Settings) -> str:
    return subprocess.run(
        ["pg_dump", "--data-only", settings.database_url],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


async def dead_letter_bodies(broker: Broker) -> list[bytes]:
    held, _ = await read_dead_letters(broker.settings)
    return [letter.body for letter in held]


async def test_an_erasure_forgets_every_copy_and_keeps_everyone_elses(
    broker: Broker, world: World, services: TestServices, settings: Settings, tmp_path: Path
) -> None:
    async with tap_events(broker.channel, broker.topology.events_exchange) as tap:
        with worker(services, tmp_path, broker, "eraser") as running:
            await running.wait_ready_async()
            planted = await plant(world, broker, tap)
            dump = database_dump(settings)
            assert planted.marks["alice_personal"] in dump and "AliceNick" in dump
            erasure = request("erase", {"user_id": planted.alice}, "user", planted.alice,
                              strict=True)  # fmt: skip

            await publish_request(broker, erasure)
            answer = await answer_of(tap, erasure)
            [audit] = await tap.wait_for(SubjectErased, request_id=erasure.request_id)

            # Repeated to another shard: the stored answer, changing nothing.
            assert erasure.context is not None
            elsewhere = erasure.context.model_copy(update={"shard_id": SHARD + 1})
            again = erasure.model_copy(update={"event_id": uuid.uuid4(), "context": elsewhere})
            await publish_request(broker, again)
            await tap.wait_until(
                lambda t: any(
                    d.routing_key == f"result.shard.{SHARD + 1}"
                    for d in t.deliveries_with(correlation_id=erasure.request_id)
                ),
                what="the repeated answer on the repeated request's shard",
            )

    assert answer.status == "done" and answer.reason is None
    assert answer.receipt is not None
    assert answer.receipt.model_dump() == {
        "memories_deleted": 2,
        "revisions_redacted": 2,
        "teachers_removed": 0,
        "records_redacted": 2,
        "outbox_rows_deleted": answer.receipt.outbox_rows_deleted,
        "dead_letters_removed": 2,
        "notices_to_retract": 1,
    }
    assert audit.receipt == answer.receipt and audit.subject_id == planted.alice
    [retract] = tap.events(NoticeRetract)
    [retract_delivery] = [d for d in tap.deliveries if d.event == retract]
    assert retract_delivery.routing_key == f"retract.shard.{NOTICE_SHARD}"
    assert retract.channel_id == "5001" and str(retract.memory_id) == retract.message_id
    [repeated] = [
        event
        for event in tap.events(DataRequestCompleted, request_id=erasure.request_id)
        if event.event_id != answer.event_id
    ]
    assert repeated.receipt == answer.receipt
    assert len(tap.events(SubjectErased, request_id=erasure.request_id)) == 1

    dump = database_dump(settings)
    letters = b"\n".join(await dead_letter_bodies(broker))
    for name, text in planted.marks.items():
        if name.startswith("alice_"):
            assert text not in dump, name
            assert text.encode() not in letters, name
        elif name.endswith(("letter", "raw")):
            assert text.encode() in letters, name
        else:
            assert text in dump, name
    assert "AliceNick" not in dump and "BobNick" in dump
    # The kept letters stay in the order they came, with their properties and headers.
    held, _ = await read_dead_letters(broker.settings)
    assert [planted.marks["bob_letter"].encode() in h.body for h in held] == [True, False]
    assert held[0].entry.reason == "planted" and held[0].entry.tool_call_id is not None
    assert held[0].content_type is None
    [row] = await world.execute(
        "SELECT status, receipt, subject_id FROM data_requests WHERE request_id = %s",
        erasure.request_id,
    )
    assert row["status"] == "done" and row["subject_id"] == planted.alice


@pytest.mark.parametrize(
    ("subject_kind", "by_kind", "reason"),
    [
        ("user", "user_other", "not_the_subject"),
        ("user", "server_owner", "not_the_subject"),
        ("guild", "user", "guild_subject_by_user"),
    ],
)
async def test_a_refused_request_changes_nothing(
    broker: Broker,
    world: World,
    services: TestServices,
    tmp_path: Path,
    subject_kind: str,
    by_kind: str,
    reason: str,
) -> None:
    async with tap_events(broker.channel, broker.topology.events_exchange) as tap:
        with worker(services, tmp_path, broker, "refuser") as running:
            await running.wait_ready_async()
            planted = await plant(world, broker, tap)
            subject = (
                {"user_id": planted.alice}
                if subject_kind == "user"
                else {"guild_id": str(planted.persona.server.disc_id)}
            )
            requester = snowflake() if by_kind == "user_other" else planted.alice
            refused = request("erase", subject, by_kind.removesuffix("_other"), requester)
            before = database_dump(broker.settings)

            await publish_request(broker, refused)
            answer = await answer_of(tap, refused)

    assert (answer.status, answer.reason, answer.receipt) == ("refused", reason, None)
    assert not tap.events(SubjectErased, request_id=refused.request_id)
    after = database_dump(broker.settings)
    for text in planted.marks.values():
        if not text.startswith(("alice-letter", "alice-raw", "bob-letter", "bob-raw")):
            assert text in after
    assert before.count(planted.marks["alice_personal"]) == after.count(
        planted.marks["alice_personal"]
    )
    assert len(await dead_letter_bodies(broker)) == 4
    [row] = await world.execute(
        "SELECT status, reason FROM data_requests WHERE request_id = %s", refused.request_id
    )
    assert row == {"status": "refused", "reason": reason}


async def test_an_export_answers_the_document(
    broker: Broker, world: World, services: TestServices, tmp_path: Path
) -> None:
    async with tap_events(broker.channel, broker.topology.events_exchange) as tap:
        with worker(services, tmp_path, broker, "exporter") as running:
            await running.wait_ready_async()
            planted = await plant(world, broker, tap)
            export = request("export", {"user_id": planted.alice}, "user", planted.alice)
            await publish_request(broker, export)
            answer = await answer_of(tap, export)

    assert answer.status == "done" and answer.receipt is None
    document = answer.document
    assert document is not None and document.user is not None
    assert document.user.user_nickname == "AliceNick"
    assert [m.content for m in document.personal_memories] == [planted.marks["alice_personal"]]
    assert [m.content for m in document.server_memories_taught] == [planted.marks["alice_taught"]]
    assert document.tool_calls_triggered == 1
    assert planted.bob not in document.model_dump_json()


async def test_creations_racing_an_erasure_on_two_workers_leave_nothing_of_the_subject(
    broker: Broker, world: World, services: TestServices, tmp_path: Path
) -> None:
    server = await world.server()
    persona = await world.persona(server)
    triggerer = snowflake()
    _, alice = await world.user()
    await world.member(server, alice, "alice_w")
    await world.member(server, triggerer, "trig_w")
    creations = [
        _create(persona, triggerer, f"alice-race-{n}-{uuid.uuid4().hex[:6]}", about=(alice, "Al"))
        for n in range(40)
    ]
    erasure = request("erase", {"user_id": alice}, "user", alice)
    async with tap_events(broker.channel, broker.topology.events_exchange) as tap:
        with (
            worker(services, tmp_path, broker, "one", LTM_PREFETCH="4") as one,
            worker(services, tmp_path, broker, "two", LTM_PREFETCH="4") as two,
        ):
            await asyncio.gather(one.wait_ready_async(), two.wait_ready_async())
            first, rest = creations[:20], creations[20:]
            await asyncio.gather(*(publish_tool_call(broker.channel, broker.topology, c)
                                   for c in first))  # fmt: skip
            await publish_request(broker, erasure)
            await asyncio.gather(*(publish_tool_call(broker.channel, broker.topology, c)
                                   for c in rest))  # fmt: skip
            await answer_of(tap, erasure)
            await tap.wait_until(
                lambda t: len(t.events(ToolCallCompleted)) >= len(creations),
                timeout=60,
                what="every creation answered",
            )
    remaining = await world.execute(
        "SELECT m.content FROM personal_memories AS m JOIN users AS u ON u.user_id = m.user_id"
        " WHERE u.user_disc_id = %s",
        alice,
    )
    assert remaining == []  # erased, or refused after (privacy level 2)
    texts = await world.execute(
        "SELECT content_after FROM memory_revisions WHERE scope = 'target_user'"
        " AND content_after LIKE 'alice-race-%%'"
    )
    assert texts == []


@pytest.mark.parametrize("failpoint", ["after_dead_letters", "after_commit", "after_publish"])
async def test_a_worker_killed_during_an_erasure_finishes_it_once_with_the_same_receipt(
    broker: Broker,
    world: World,
    services: TestServices,
    tmp_path: Path,
    failpoint: str,
) -> None:
    async with tap_events(broker.channel, broker.topology.events_exchange) as tap:
        with worker(services, tmp_path, broker, "planter") as planter:
            await planter.wait_ready_async()
            planted = await plant(world, broker, tap)
        erasure = request("erase", {"user_id": planted.alice}, "user", planted.alice)
        with worker(services, tmp_path, broker, "doomed", LTM_FAILPOINTS=failpoint) as doomed:
            await doomed.wait_ready_async()
            await publish_request(broker, erasure)
            exit_code = await asyncio.to_thread(doomed.wait_exit, 30)
        assert exit_code == -9, "the worker was meant to die by SIGKILL at the failpoint"
        with worker(services, tmp_path, broker, "successor") as successor:
            await successor.wait_ready_async()
            answer = await answer_of(tap, erasure)
            await tap.wait_for(SubjectErased, request_id=erasure.request_id, timeout=30)
    assert answer.receipt is not None
    assert answer.receipt.model_dump() == {
        "memories_deleted": 1,
        "revisions_redacted": 1,
        "teachers_removed": 1,
        "records_redacted": 2,
        "outbox_rows_deleted": answer.receipt.outbox_rows_deleted,
        "dead_letters_removed": 2,
        "notices_to_retract": 1,
    }
    receipts = {e.receipt for e in tap.events(DataRequestCompleted, request_id=erasure.request_id)}
    assert receipts == {answer.receipt}
    assert len({e.event_id for e in tap.events(SubjectErased, request_id=erasure.request_id)}) == 1
    letters = b"\n".join(await dead_letter_bodies(broker))
    assert planted.marks["alice_letter"].encode() not in letters
    assert planted.marks["bob_letter"].encode() in letters


async def test_the_operators_commands_export_forget_list_and_refuse_without_a_reason(
    broker: Broker, world: World, services: TestServices, tmp_path: Path
) -> None:
    prefix = {"LTM_AMQP_PREFIX": broker.settings.amqp_prefix}
    async with tap_events(broker.channel, broker.topology.events_exchange) as tap:
        with worker(services, tmp_path, broker, "operated") as running:
            await running.wait_ready_async()
            planted = await plant(world, broker, tap)

            exported = await run_ltm(services, "user", "export", planted.alice, "--json", **prefix)
            assert exported.code == 0, exported.stderr
            document = json.loads(exported.stdout)
            assert document["schema_version"] == 1
            assert document["user"]["user_id"] == planted.alice

            missing = await run_ltm(services, "user", "forget", planted.alice, **prefix)
            assert missing.code == 2 and "--reason" in missing.stderr

            forgot = await run_ltm(
                services, "user", "forget", planted.alice, "--reason", "asked by mail",
                "--json", **prefix,
            )  # fmt: skip
            assert forgot.code == 0, forgot.stderr
            answer = json.loads(forgot.stdout)
            assert answer["status"] == "done"
            assert answer["requested_by"]["kind"] == "operator"
            assert answer["requested_by"]["id"].startswith("cli:")
            assert answer["receipt"]["memories_deleted"] == 1

            server = planted.persona.server.disc_id
            gone = await run_ltm(services, "server", "forget", server, "--reason", "left", **prefix)
            assert gone.code == 0, gone.stderr
            assert "memories deleted" in gone.stdout

            listed = await run_ltm(services, "data-requests", "list", "--json", **prefix)
    assert listed.code == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [row["kind"] for row in rows[:3]] == ["erase", "erase", "export"]
    assert rows[1]["stated_reason"] == "asked by mail"
    assert planted.marks["alice_personal"] not in listed.stdout


@pytest.mark.parametrize(
    ("operator_user", "status"), [("guest", "done"), ("ltm-operator", "refused")]
)
async def test_an_operators_request_is_run_only_from_the_operators_account(
    broker: Broker,
    world: World,
    services: TestServices,
    tmp_path: Path,
    operator_user: str,
    status: str,
) -> None:
    _, alice = await world.user(nickname="Trusted")
    # The test's broker user is `guest`: trusted, and the operators' account or not.
    env = {"LTM_TRUSTED_PUBLISHERS": "guest", "LTM_BROKER_OPERATOR_USER": operator_user}
    erasure = request("erase", {"user_id": alice}, "operator", "cli:someone")
    async with tap_events(broker.channel, broker.topology.events_exchange) as tap:
        with worker(services, tmp_path, broker, "trusting", **env) as running:
            await running.wait_ready_async()
            await publish_request(broker, erasure, user_id="guest")
            answer = await answer_of(tap, erasure)
    assert answer.status == status
    assert answer.reason == (None if status == "done" else "untrusted_publisher")
    [user] = await world.execute("SELECT user_nickname FROM users WHERE user_disc_id = %s", alice)
    assert user["user_nickname"] == (None if status == "done" else "Trusted")


async def test_replay_asks_again_the_erasures_since_a_time_after_a_restore(
    broker: Broker, world: World, services: TestServices, tmp_path: Path
) -> None:
    prefix = {"LTM_AMQP_PREFIX": broker.settings.amqp_prefix}
    _, alice = await world.user(nickname="Restored")
    # The module's earlier tests erase users on the same audit stream, up to a moment ago: the
    # worker stamps its records with this machine's clock, so "since" is now, with no margin.
    since = datetime.now(UTC)
    erasure = request("erase", {"user_id": alice}, "user", alice)
    async with tap_events(broker.channel, broker.topology.events_exchange) as tap:
        with worker(services, tmp_path, broker, "replayer") as running:
            await running.wait_ready_async()
            await publish_request(broker, erasure)
            await answer_of(tap, erasure)
            # A backup taken before the erasure restored: its record and the nickname are back.
            await world.execute(
                "DELETE FROM data_requests WHERE request_id = %s", erasure.request_id
            )
            await world.execute(
                "UPDATE users SET user_nickname = 'Restored' WHERE user_disc_id = %s", alice
            )

            replayed = await run_ltm(
                services, "data-requests", "replay", "--since", since.isoformat(), **prefix
            )
    assert replayed.code == 0, replayed.stderr
    assert "1 erasure(s) since" in replayed.stdout
    [user] = await world.execute("SELECT user_nickname FROM users WHERE user_disc_id = %s", alice)
    assert user["user_nickname"] is None
    [row] = await world.execute(
        "SELECT status FROM data_requests WHERE request_id = %s", erasure.request_id
    )
    assert row["status"] == "done"
