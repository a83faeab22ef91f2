"""What a revert plans from the memories' histories: back to before the earliest matching
revision, skipped when someone else changed the memory since, nothing for a memory that
already is as it should be."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from operators.revert_plan import (
    CHANGED_BY_SOMEONE_ELSE,
    HistoryEntry,
    MemoryRevert,
    SkippedMemory,
    TooManyMemories,
    plan_revert,
)
from operators.revision_store import Revision

_ids = iter(range(1, 10_000))


def _revision(memory_id: int, action: str, before: str, after: str | None) -> Revision:
    return Revision(
        revision_id=next(_ids),
        scope="server_wide",
        memory_id=memory_id,
        action=action,
        content_before=before,
        content_after=after,
        server_id=1,
        owner_user_id=None,
        persona_lineage_id=3,
        actor_disc_id="42",
        tool_call_id="call",
        occurred_at=datetime(2026, 1, 1, tzinfo=UTC),
    )


def _matching(revision: Revision) -> HistoryEntry:
    return HistoryEntry(revision, matches=True)


def _other(revision: Revision) -> HistoryEntry:
    return HistoryEntry(revision, matches=False)


def test_an_update_goes_back_to_before_the_earliest_matching_revision() -> None:
    earlier = _other(_revision(7, "updated", "tea", "green tea"))
    first = _matching(_revision(7, "updated", "green tea", "coffee"))
    second = _matching(_revision(7, "updated", "coffee", "espresso"))

    plan = plan_revert([second, earlier, first], {7: "espresso"})

    assert plan.reverts == (
        MemoryRevert(7, "server_wide", "espresso", "green tea", first.revision),
    )
    assert plan.skipped == () and plan.touched == 1


def test_a_created_memory_is_removed_and_a_deleted_one_comes_back() -> None:
    created = _matching(_revision(1, "created", "", "spam"))
    deleted = _matching(_revision(2, "deleted", "plays the cello", None))

    plan = plan_revert([created, deleted], {1: "spam"})

    assert [(r.memory_id, r.before, r.after) for r in plan.reverts] == [
        (1, "spam", None),
        (2, None, "plays the cello"),
    ]


def test_a_memory_changed_since_by_someone_else_is_skipped_unless_forced() -> None:
    mine = _matching(_revision(5, "updated", "a", "b"))
    theirs = _other(_revision(5, "updated", "b", "c"))

    plan = plan_revert([mine, theirs], {5: "c"})
    assert plan.reverts == ()
    assert plan.skipped == (SkippedMemory(5, "server_wide", CHANGED_BY_SOMEONE_ELSE),)

    forced = plan_revert([mine, theirs], {5: "c"}, force=True)
    assert forced.reverts == (MemoryRevert(5, "server_wide", "c", "a", mine.revision),)
    assert forced.skipped == ()


def test_a_memory_already_as_it_should_be_is_neither_reverted_nor_skipped() -> None:
    mine = _matching(_revision(5, "updated", "a", "b"))
    restored = _other(_revision(5, "restored", "b", "a"))
    removed = _matching(_revision(6, "created", "", "x"))

    plan = plan_revert([mine, restored, removed], {5: "a"})

    assert plan.reverts == () and plan.skipped == ()
    assert plan.touched == 2


def test_revisions_of_memories_no_matching_revision_touched_are_left_out() -> None:
    plan = plan_revert([_other(_revision(9, "updated", "a", "b"))], {9: "b"})

    assert plan.reverts == () and plan.skipped == () and plan.touched == 0


def test_more_memories_than_a_revert_takes_are_refused() -> None:
    history = [_matching(_revision(m, "updated", "a", "b")) for m in range(1, 5)]

    with pytest.raises(TooManyMemories, match="more than 3 memories"):
        plan_revert(history, {}, max_memories=3)
    assert len(plan_revert(history, {}, max_memories=4).reverts) == 4


def test_a_plan_s_fingerprint_changes_with_what_it_would_do() -> None:
    mine = _matching(_revision(5, "updated", "a", "b"))
    theirs = _other(_revision(5, "updated", "b", "c"))

    assert plan_revert([mine], {5: "b"}).fingerprint == plan_revert([mine], {5: "b"}).fingerprint
    assert plan_revert([mine], {5: "b"}).fingerprint != plan_revert([mine], {5: "z"}).fingerprint
    assert (
        plan_revert([mine, theirs], {5: "c"}).fingerprint
        != plan_revert([mine, theirs], {5: "c"}, force=True).fingerprint
    )
