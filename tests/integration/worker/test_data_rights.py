"""An erasure and an export on the real database (`worker.adapters.data_rights`): each store
of docs/data-rights.md's table, `strict`, `keep_learning`, a deleted account, a server's
erasure, the export's document, and the one change the append-only trigger allows."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

from contracts import (
    CREATE_LONG_TERM_MEMORY,
    DataRequestRequested,
    ExportDocument,
    MemoryStatus,
    Receipt,
)
from contracts.data_requests import RequestedBy, RequesterKind, Subject
from harness.world import participant
from infra.settings import Settings
from infra.storage.engine import create_engine
from tests.integration.worker.checks import Pipeline, Scene
from worker.adapters.data_rights import OTHER_ACTOR, DataRightsStore, Erased
from worker.core.data_requests import ERASED_ACTOR


@pytest.fixture(scope="module")
async def rights(settings: Settings) -> AsyncIterator[DataRightsStore]:
    store = DataRightsStore(create_engine(settings.sqlalchemy_url, pool_size=2))
    yield store
    await store.engine.dispose()


def erase(
    subject: Subject,
    by: RequesterKind = "user",
    *,
    by_id: str | None = None,
    strict: bool = False,
    keep_learning: bool = False,
    kind: str = "erase",
) -> DataRequestRequested:
    return DataRequestRequested.model_validate(
        {
            "request_id": f"req-{uuid.uuid4()}",
            "kind": kind,
            "subject": subject.model_dump(exclude_none=True),
            "requested_by": RequestedBy(kind=by, id=by_id or subject.id).model_dump(),
            "strict": strict,
            "keep_learning": keep_learning,
        }
    )


async def run(rights: DataRightsStore, request: DataRequestRequested) -> Erased:
    async with rights.transaction() as tx:
        return await tx.erase(request)


@dataclass
class Planted:
    """Alice (the subject) and Bob (another user) with marked texts in every store."""

    scene: Scene
    alice: str
    alice_user_id: int
    bob: str
    bob_user_id: int
    alice_personal: int
    alice_taught: int
    bob_personal: int
    alice_calls: list[str]
    bob_calls: list[str]
    marks: dict[str, str]


async def plant(pipeline: Pipeline) -> Planted:
    """Through the real pipeline: the triggerer T creates a memory about Alice and one about
    Bob and updates Alice's; Alice herself teaches the server a fact."""
    world = pipeline.world
    scene = await pipeline.guild()
    # Every name and text carries this plant's mark: a check of the whole database must not
    # meet the rows another test left there.
    mark = uuid.uuid4().hex[:8]
    alice_user_id, alice = await world.user(nickname=f"Ally-{mark}")
    bob_user_id, bob = await world.user(nickname="Bobby")
    await world.member(scene.server, alice, "alice_w", display_name="Alice")
    await world.member(scene.server, bob, "bob_w", display_name="Bob")
    await world.blacklist(scene.server, alice_user_id)
    marks = {
        "alice_nickname": f"Ally-{mark}",
        "alice_personal": f"alice-secret-{mark}",
        "alice_update": f"alice-secret-changed-{mark}",
        "alice_taught": f"alice-taught-{mark}",
        "bob_personal": f"bob-secret-{mark}",
    }
    alice_p = participant(alice, "Alice", label="Alice (@alice_w)")
    bob_p = participant(bob, "Bob", label="Bob (@bob_w)")

    def about(target: str, content: str) -> dict[str, Any]:
        return {"memory_content": content, "memory_scope": "target_user", "target_user": target}

    created_alice = scene.create(about("Alice", marks["alice_personal"]), alice_p)
    created_bob = scene.create(about("Bob", marks["bob_personal"]), bob_p)
    [p1, p2] = [await pipeline.run(call) for call in (created_alice, created_bob)]
    assert p1.result.status is MemoryStatus.SAVED and p2.result.status is MemoryStatus.SAVED
    alice_personal, bob_personal = p1.result.data.memory_id, p2.result.data.memory_id
    assert alice_personal is not None and bob_personal is not None
    updated = scene.call(
        {
            "memory_id": alice_personal,
            "memory_content": marks["alice_update"],
            "target_user": "Alice",
        },
        alice_p,
    )
    assert (await pipeline.run(updated)).result.status is MemoryStatus.UPDATED
    alice_scene = Scene(scene.server, scene.persona, alice, alice_user_id)
    taught = alice_scene.create(
        {"memory_content": marks["alice_taught"], "memory_scope": "server_wide"},
        tool_name=CREATE_LONG_TERM_MEMORY,
    )
    processed = await pipeline.run(taught)
    assert processed.result.status is MemoryStatus.SAVED
    alice_taught = processed.result.data.memory_id
    assert alice_taught is not None
    for memory_id, owner in ((alice_personal, alice), (bob_personal, bob)):
        await pipeline.sql(
            "INSERT INTO posted_notices (event_id, shard_id, channel_id, message_id, memory_id,"
            " scope, owner_disc_id, guild_id) VALUES (%s, 3, '1001', %s, %s, 'target_user',"
            " %s, %s)",
            uuid.uuid4(),
            str(memory_id),
            memory_id,
            owner,
            scene.server.disc_id,
        )
    return Planted(
        scene,
        alice,
        alice_user_id,
        bob,
        bob_user_id,
        alice_personal,
        alice_taught,
        bob_personal,
        [created_alice.tool_call_id, updated.tool_call_id, taught.tool_call_id],
        [created_bob.tool_call_id],
        marks,
    )


async def database_text(pipeline: Pipeline) -> str:
    """Every row of every table that may hold a text, as one string."""
    tables = [
        "personal_memories",
        "server_memories",
        "memory_revisions",
        "tool_call_inbox",
        "users",
        "guild_members",
        "data_requests",
    ]
    parts = [str(await pipeline.sql(f"SELECT * FROM {table}")) for table in tables]
    outbox = await pipeline.sql("SELECT convert_from(body, 'UTF8') AS body FROM outbox")
    parts.append(str(outbox))
    return "\n".join(parts)


async def test_an_erasure_of_a_user_forgets_every_store(
    pipeline: Pipeline, rights: DataRightsStore
) -> None:
    planted = await plant(pipeline)
    before = await database_text(pipeline)
    assert all(text in before for text in planted.marks.values())

    erased = await run(rights, erase(Subject(user_id=planted.alice)))

    receipt = erased.counts.receipt(dead_letters_removed=0, notices_to_retract=len(erased.notices))
    assert receipt.model_dump() == {
        "memories_deleted": 1,
        "revisions_redacted": 2,
        "teachers_removed": 1,
        "records_redacted": 3,
        "outbox_rows_deleted": receipt.outbox_rows_deleted,
        "dead_letters_removed": 0,
        "notices_to_retract": 1,
    }
    assert receipt.outbox_rows_deleted >= 4 * 3  # result, embed, invalidation, audit per call
    assert [notice.memory_id for notice in erased.notices] == [planted.alice_personal]
    assert erased.invalidated_users == {planted.alice}
    assert planted.scene.server.disc_id in erased.invalidated_servers

    after = await database_text(pipeline)
    assert planted.marks["alice_personal"] not in after
    assert planted.marks["alice_update"] not in after
    # The server keeps the fact, without its teacher.
    assert planted.marks["alice_taught"] in after
    assert planted.marks["bob_personal"] in after
    assert planted.marks["alice_nickname"] not in after

    world = pipeline.world
    assert await world.memory(planted.alice_personal) is None
    revisions = await world.revisions(planted.alice_personal)
    assert len(revisions) == 2
    for revision in revisions:
        assert revision["content_before"] is None and revision["content_after"] is None
        assert revision["redacted_at"] is not None
    [taught] = await pipeline.sql(
        "SELECT user_id, content FROM server_memories WHERE server_memory_id = %s",
        planted.alice_taught,
    )
    assert taught["user_id"] is None
    [taught_revision] = await world.revisions(planted.alice_taught)
    assert taught_revision["actor_disc_id"] == ERASED_ACTOR
    assert taught_revision["content_after"] == planted.marks["alice_taught"]
    [user] = await pipeline.sql(
        "SELECT user_nickname, privacy_level FROM users WHERE user_id = %s", planted.alice_user_id
    )
    assert user == {"user_nickname": None, "privacy_level": 2}
    assert not await pipeline.sql(
        "SELECT 1 FROM guild_members WHERE user_disc_id = %s", planted.alice
    )
    for tool_call_id in planted.alice_calls:
        record = await world.inbox(tool_call_id)
        assert record is not None
        assert record["fingerprint"] is None
        assert set(record["result"]) <= {"status", "success", "tool_name", "data"}
        assert set(record["result"]["data"]) <= {"memory_id", "scope"}
        assert not await world.outbox_of_call(tool_call_id)
    [bob_call] = planted.bob_calls
    bob_record = await world.inbox(bob_call)
    assert bob_record is not None and bob_record["fingerprint"] is not None
    assert await world.outbox_of_call(bob_call)
    # Bob's rows are his as they were.
    [bob_user] = await pipeline.sql(
        "SELECT user_nickname FROM users WHERE user_id = %s", planted.bob_user_id
    )
    assert bob_user["user_nickname"] == "Bobby"


async def test_an_erasure_run_again_changes_nothing_more(
    pipeline: Pipeline, rights: DataRightsStore
) -> None:
    planted = await plant(pipeline)
    await run(rights, erase(Subject(user_id=planted.alice)))

    again = await run(rights, erase(Subject(user_id=planted.alice)))

    assert again.counts.receipt(dead_letters_removed=0, notices_to_retract=0) == Receipt()


async def test_strict_deletes_the_taught_memories_too(
    pipeline: Pipeline, rights: DataRightsStore
) -> None:
    planted = await plant(pipeline)

    erased = await run(rights, erase(Subject(user_id=planted.alice), strict=True))

    assert erased.counts.memories_deleted == 2
    assert erased.counts.teachers_removed == 0
    assert erased.counts.revisions_redacted == 3
    assert await pipeline.world.memory(planted.alice_taught) is None
    assert planted.marks["alice_taught"] not in await database_text(pipeline)
    assert planted.marks["bob_personal"] in await database_text(pipeline)


@pytest.mark.parametrize("keep_learning", [True, False])
async def test_keep_learning_leaves_the_privacy_level(
    pipeline: Pipeline, rights: DataRightsStore, keep_learning: bool
) -> None:
    user_id, disc_id = await pipeline.world.user(nickname="Nick", privacy_level=1)

    await run(rights, erase(Subject(user_id=disc_id), keep_learning=keep_learning))

    [user] = await pipeline.sql(
        "SELECT user_nickname, privacy_level FROM users WHERE user_id = %s", user_id
    )
    assert user == {"user_nickname": None, "privacy_level": 1 if keep_learning else 2}


async def test_a_deleted_account_loses_its_users_row_and_blacklist_rows(
    pipeline: Pipeline, rights: DataRightsStore
) -> None:
    planted = await plant(pipeline)

    await run(rights, erase(Subject(user_id=planted.alice), "discord_deleted_user"))

    assert not await pipeline.sql("SELECT 1 FROM users WHERE user_id = %s", planted.alice_user_id)
    assert not await pipeline.sql(
        "SELECT 1 FROM personalization_blacklist WHERE user_id = %s", planted.alice_user_id
    )
    assert planted.marks["alice_taught"] in await database_text(pipeline)


async def test_a_server_erasure_forgets_the_server_and_keeps_personal_memories(
    pipeline: Pipeline, rights: DataRightsStore
) -> None:
    planted = await plant(pipeline)
    server = planted.scene.server

    erased = await run(rights, erase(Subject(guild_id=server.disc_id), "server_owner", by_id="9"))

    assert erased.counts.memories_deleted == 1
    assert erased.counts.revisions_redacted == 1
    assert erased.counts.records_redacted == 4  # every call was made in the guild
    assert len(erased.notices) == 2  # both notices were posted in it
    assert erased.invalidated_servers == {server.disc_id}
    text = await database_text(pipeline)
    assert planted.marks["alice_taught"] not in text
    for table in ("server_configs", "guild_members", "personalization_blacklist"):
        query = f"SELECT 1 FROM {table} WHERE server_id = %s"
        assert not await pipeline.sql(query, server.server_id)
    # Personal memories belong to their users.
    assert await pipeline.world.content(planted.bob_personal) == planted.marks["bob_personal"]


async def test_the_export_holds_the_user_and_nothing_of_anyone_else(
    pipeline: Pipeline, rights: DataRightsStore
) -> None:
    planted = await plant(pipeline)

    async with rights.transaction() as tx:
        document = await tx.export(erase(Subject(user_id=planted.alice), kind="export"))

    assert isinstance(document, ExportDocument)
    dumped = document.model_dump(mode="json")
    assert set(dumped) == {
        "schema_version",
        "user",
        "guild_members",
        "personal_memories",
        "server_memories_taught",
        "tool_calls_triggered",
    }
    assert dumped["user"] == {
        "user_id": planted.alice,
        "user_nickname": planted.marks["alice_nickname"],
        "privacy_level": 0,
    }
    assert [m["guild_id"] for m in dumped["guild_members"]] == [planted.scene.server.disc_id]
    [memory] = dumped["personal_memories"]
    assert memory["content"] == planted.marks["alice_update"]
    assert [r["action"] for r in memory["revisions"]] == ["created", "updated"]
    # The memory was written by the triggerer, not by Alice: no one else's id.
    assert {r["actor_disc_id"] for r in memory["revisions"]} == {OTHER_ACTOR}
    assert dumped["server_memories_taught"] == [
        {
            "guild_id": planted.scene.server.disc_id,
            "memory_id": planted.alice_taught,
            "content": planted.marks["alice_taught"],
        }
    ]
    assert dumped["tool_calls_triggered"] == 1
    as_text = document.model_dump_json()
    assert planted.bob not in as_text
    assert planted.marks["bob_personal"] not in as_text
    assert planted.scene.triggerer not in as_text


async def test_the_trigger_allows_the_redaction_and_nothing_else(
    pipeline: Pipeline, rights: DataRightsStore
) -> None:
    planted = await plant(pipeline)
    [revision] = await pipeline.world.revisions(planted.bob_personal)
    revision_id = revision["revision_id"]
    refused = [
        "UPDATE memory_revisions SET content_after = 'x' WHERE revision_id = %s",
        "UPDATE memory_revisions SET content_after = NULL WHERE revision_id = %s",
        "UPDATE memory_revisions SET actor_disc_id = 'someone' WHERE revision_id = %s",
        "UPDATE memory_revisions SET content_before = NULL, content_after = NULL,"
        " redacted_at = now(), action = 'deleted' WHERE revision_id = %s",
        "DELETE FROM memory_revisions WHERE revision_id = %s",
    ]
    for statement in refused:
        with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
            await pipeline.sql(statement, revision_id)
    await pipeline.sql(
        "UPDATE memory_revisions SET actor_disc_id = 'erased' WHERE revision_id = %s", revision_id
    )
    await pipeline.sql(
        "UPDATE memory_revisions SET content_before = NULL, content_after = NULL,"
        " redacted_at = now() WHERE revision_id = %s",
        revision_id,
    )
    [redacted] = await pipeline.world.revisions(planted.bob_personal)
    assert redacted["content_after"] is None and redacted["actor_disc_id"] == "erased"
    # Once redacted, its time stays.
    with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
        await pipeline.sql(
            "UPDATE memory_revisions SET redacted_at = now() + interval '1 day'"
            " WHERE revision_id = %s",
            revision_id,
        )


async def test_a_redacted_record_answers_a_redelivered_call(
    pipeline: Pipeline, rights: DataRightsStore
) -> None:
    planted = await plant(pipeline)
    await run(rights, erase(Subject(user_id=planted.alice)))
    [call_id, *_] = planted.alice_calls
    record = await pipeline.world.inbox(call_id)
    assert record is not None

    async with pipeline.store.transaction() as tx:
        from worker.adapters.inbox import REDACTED_MESSAGE, stored_results

        cursor = tx.inbox._cursor  # type: ignore[attr-defined]
        stored = await stored_results(cursor, [call_id])

    assert stored[call_id].status is MemoryStatus.SAVED
    assert stored[call_id].message == REDACTED_MESSAGE
    assert stored[call_id].fingerprint is None
