"""`memory_revisions`, append-only: the insert every writer of a revision shares (the worker's
tools and the operators' restore and revert), so that the columns are named once."""

from __future__ import annotations

from typing import Final

from sqlalchemy import Column

from infra.storage.schema import memory_revisions

__all__ = [
    "REVISION_INSERT",
    "REVISION_INSERT_WITH_ID",
    "REVISION_INSERT_WITH_ID_AND_REASON",
    "REVISION_INSERT_WITH_REASON",
]

_REVISION = memory_revisions.c

# The columns every writer gives a value, in the order of its VALUES or SELECT list; the
# revision's id comes from its sequence unless taken beforehand (below). Listed rather than
# every column of the table: a column added later gets its default, not a writer's value.
_WRITTEN_COLUMNS: Final[tuple[Column[object], ...]] = (
    _REVISION.scope,
    _REVISION.memory_id,
    _REVISION.action,
    _REVISION.content_before,
    _REVISION.content_after,
    _REVISION.server_id,
    _REVISION.owner_user_id,
    _REVISION.persona_lineage_id,
    _REVISION.actor_disc_id,
    _REVISION.tool_call_id,
    _REVISION.occurred_at,
)


def _insert(columns: tuple[Column[object], ...]) -> str:
    names = ", ".join(column.name for column in columns)
    return f"\n    INSERT INTO {memory_revisions.name} ({names})\n"


REVISION_INSERT: Final = _insert(_WRITTEN_COLUMNS)

# The same with the revision's id taken beforehand (the create tool's, read with its scope).
REVISION_INSERT_WITH_ID: Final = _insert((_REVISION.revision_id, *_WRITTEN_COLUMNS))

# The same with the operator's justification last (a restore's, null for a single one; a
# revert's `--reason`): only the operators' restore writes `reason`.
REVISION_INSERT_WITH_REASON: Final = _insert((*_WRITTEN_COLUMNS, _REVISION.reason))

# Both: a restore that takes its revision's id first, to write it onto the restored row.
REVISION_INSERT_WITH_ID_AND_REASON: Final = _insert(
    (_REVISION.revision_id, *_WRITTEN_COLUMNS, _REVISION.reason)
)
