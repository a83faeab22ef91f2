"""What the LLM saw (`context.seen`): the write carries the revision it was shown, and a write
refused as stale, or finding the memory gone, is answered with what the LLM needs to decide
again."""

from __future__ import annotations

from dataclasses import replace

from contracts import MemoryStatus
from tests.unit.worker.given import ALICE, ALICE_ROW, context, state
from worker.core.model import MemoryWrite, StaleWrite, UpdateArguments
from worker.core.update import (
    DELETED_SINCE_SHOWN,
    changed_since_shown,
    not_found,
    plan_update,
)

SATURDAYS = "Movie night is on Saturdays."
SERVER_WRITE = MemoryWrite(
    scope="server_wide",
    memory_id=41,
    content="Movie night is on Fridays at 8 pm.",
    server_id=3,
    persona_lineage_id=42,
    seen_revision_id=7,
)
PERSONAL_WRITE = replace(
    SERVER_WRITE,
    scope="target_user",
    owner_user_id=ALICE_ROW.user_id,
    owner_disc_id=ALICE.user_id,
    owner_label=ALICE.label,
)


def _arguments(memory_id: int = 41) -> UpdateArguments:
    return UpdateArguments(memory_id=memory_id, content="x", target_user=None)


def test_the_write_carries_the_revision_the_llm_was_shown() -> None:
    shown = context(seen={"41": 7, "42": 0})
    server = plan_update(_arguments(), "x", state(), None, context=shown)
    personal = plan_update(_arguments(42), "x", state(), (ALICE, ALICE_ROW), context=shown)
    assert (server.seen_revision_id, personal.seen_revision_id) == (7, 0)


def test_a_memory_not_shown_or_no_seen_is_written_as_before() -> None:
    assert plan_update(_arguments(), "x", state(), None, context=context()).seen_revision_id is None
    other = context(seen={"40": 7})
    assert plan_update(_arguments(), "x", state(), None, context=other).seen_revision_id is None


def test_a_stale_write_quotes_the_memory_as_stored_now() -> None:
    current = "Movie night is on {user}'s Saturdays."
    refusal = changed_since_shown(SERVER_WRITE, StaleWrite(9, current))
    assert refusal.status is MemoryStatus.CONFLICT
    assert not refusal.status.success
    assert "ID:41" in refusal.message and "changed since it was shown" in refusal.message
    assert f'"{current}"' in refusal.message
    data = refusal.data.model_dump(mode="json")
    assert data == {
        "scope": "server_wide",
        "memory_id": 41,
        "current_revision_id": 9,
        "current_content": current,
    }


def test_a_stale_personal_write_names_the_person() -> None:
    refusal = changed_since_shown(PERSONAL_WRITE, StaleWrite(9, SATURDAYS))
    assert refusal.status is MemoryStatus.CONFLICT
    assert ALICE.label in refusal.message and SATURDAYS in refusal.message
    assert refusal.data.target_user == ALICE.label
    assert (refusal.data.current_revision_id, refusal.data.current_content) == (9, SATURDAYS)


def test_a_shown_memory_that_is_gone_was_deleted_since() -> None:
    for write in (SERVER_WRITE, PERSONAL_WRITE):
        refusal = not_found(write, in_other_scope=False)
        assert refusal.status is MemoryStatus.NOT_FOUND
        assert refusal.data.reason == DELETED_SINCE_SHOWN == "deleted_since_shown"
        assert "deleted since it was shown" in refusal.message


def test_a_shown_memory_of_the_other_scope_is_not_said_deleted() -> None:
    refusal = not_found(SERVER_WRITE, in_other_scope=True)
    assert refusal.data.reason is None
    assert "target_user" in refusal.message


def test_a_memory_not_shown_that_is_gone_is_not_found_as_before() -> None:
    refusal = not_found(replace(SERVER_WRITE, seen_revision_id=None), in_other_scope=False)
    assert refusal.data.reason is None
    assert "deleted since" not in refusal.message
