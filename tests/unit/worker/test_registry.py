"""Every tool name the worker's queue is bound to has a tool, and only those."""

from __future__ import annotations

from contracts import (
    CREATE_LONG_TERM_MEMORY,
    CREATE_STATUSES,
    REMEMBER_THIS_FACT,
    TOOL_NAMES,
    UPDATE_LONG_TERM_MEMORY,
    UPDATE_STATUSES,
    MemoryStatus,
)
from worker.tools.registry import TOOLS, TOOLS_IN_ORDER, tool_for


def test_the_registry_takes_exactly_the_bound_tool_names() -> None:
    assert set(TOOLS) == set(TOOL_NAMES)
    assert tool_for("forget_everything") is None


def test_every_tool_runs_in_a_batch() -> None:
    assert set(map(id, TOOLS_IN_ORDER)) == set(map(id, TOOLS.values()))
    assert len(TOOLS_IN_ORDER) == len(set(map(id, TOOLS_IN_ORDER)))


def test_the_old_name_is_the_same_tool() -> None:
    assert TOOLS[REMEMBER_THIS_FACT] is TOOLS[CREATE_LONG_TERM_MEMORY]
    assert TOOLS[CREATE_LONG_TERM_MEMORY] is not TOOLS[UPDATE_LONG_TERM_MEMORY]


def test_each_tool_answers_in_its_own_family() -> None:
    update, create = TOOLS[UPDATE_LONG_TERM_MEMORY], TOOLS[CREATE_LONG_TERM_MEMORY]
    assert update.statuses == UPDATE_STATUSES
    assert create.statuses == CREATE_STATUSES
    assert update.unrecorded(database_away=True).status is MemoryStatus.DB_ERROR
    assert update.unrecorded(database_away=False).status is MemoryStatus.INTERNAL_ERROR
    away = create.unrecorded(database_away=True)
    assert away.status is MemoryStatus.SAVE_DB_ERROR
    assert "not saved" in away.message
    assert create.unrecorded(database_away=False).status is MemoryStatus.SAVE_INTERNAL_ERROR
    assert all(
        status.value.startswith("memory_save_")
        for status in (
            CREATE_STATUSES.invalid_args,
            CREATE_STATUSES.internal_error,
            CREATE_STATUSES.db_error,
        )
    )
