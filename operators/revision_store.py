"""`memory_revisions`: the history of every memory, and putting a memory back as it was."""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from infra.storage.revisions import REVISION_INSERT_WITH_ID_AND_REASON, REVISION_INSERT_WITH_REASON
from worker.core.restore import Remove, Unchanged, plan_restore

__all__ = [
    "ChangeTexts",
    "RestoredMemory",
    "Revision",
    "RevisionStore",
    "UnchangedMemory",
    "restore_on",
    "revision_of",
]


@dataclass(frozen=True, slots=True)
class Revision:
    revision_id: int
    scope: str
    memory_id: int
    action: str
    content_before: str
    content_after: str | None
    server_id: int | None
    owner_user_id: int | None
    persona_lineage_id: int
    actor_disc_id: str
    tool_call_id: str
    occurred_at: Any
    # An operator's justification of a revert; None for every other revision.
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class ChangeTexts:
    """A change's texts, from its revision row: the audit stream carries only the revision's id.

    `erased`: the revision was redacted (its contents set to null by an erasure), and both
    texts are None. A revision that was not redacted always has a `content_before` ("" for a
    creation), so a null one is a redaction, with or without the `redacted_at` column.
    """

    content_before: str | None
    content_after: str | None
    erased: bool


@dataclass(frozen=True, slots=True)
class RestoredMemory:
    """A restore's new revision, with the keys its events need."""

    revision: Revision
    server_disc_id: str | None
    owner_disc_id: str | None


@dataclass(frozen=True, slots=True)
class UnchangedMemory:
    """A restore that found the memory already as it was before the revision."""

    memory_id: int
    content: str | None  # None: the memory does not exist


_HISTORY: Final = text(
    "SELECT * FROM memory_revisions WHERE memory_id = :memory_id ORDER BY revision_id"
)
_REVISION: Final = text("SELECT * FROM memory_revisions WHERE revision_id = :revision_id")
_TEXTS: Final = text(
    "SELECT revision_id, content_before, content_after FROM memory_revisions"
    " WHERE revision_id = ANY(:revision_ids)"
)

# Writes the content back under the memory's own id, re-creating a deleted row, with a revision
# of what it replaced, whose id (taken first) the row keeps; `_CURRENT_CONTENT` locked that
# row (or found none) just before.
_CURRENT_CONTENT: Final = {
    "server_wide": text(
        "SELECT content FROM server_memories WHERE server_memory_id = :memory_id FOR UPDATE"
    ),
    "target_user": text(
        "SELECT content FROM personal_memories WHERE personal_memory_id = :memory_id FOR UPDATE"
    ),
}
_RESTORE_SERVER_MEMORY: Final = text(
    f"""
    WITH new_revision AS (
        SELECT nextval(pg_get_serial_sequence('memory_revisions', 'revision_id')) AS revision_id
    ), restored AS (
        INSERT INTO server_memories
            (server_memory_id, server_id, persona_lineage_id, content, revision_id)
        VALUES (
            :memory_id, :server_id, :persona_lineage_id, :content,
            (SELECT revision_id FROM new_revision)
        )
        ON CONFLICT (server_memory_id)
        DO UPDATE SET content = EXCLUDED.content, updated_at = now(),
                      revision_id = EXCLUDED.revision_id
        RETURNING server_memory_id
    ), revision AS (
        {REVISION_INSERT_WITH_ID_AND_REASON}
        SELECT (SELECT revision_id FROM new_revision), 'server_wide', server_memory_id,
               'restored', :content_before, :content, :server_id, NULL,
               :persona_lineage_id, :actor, :tool_call_id, now(), :reason
        FROM restored
        RETURNING *
    )
    SELECT revision.*, (SELECT server_disc_id FROM servers WHERE server_id = :server_id)
           AS server_disc_id, NULL AS owner_disc_id
    FROM revision
    """
)

_RESTORE_PERSONAL_MEMORY: Final = text(
    f"""
    WITH new_revision AS (
        SELECT nextval(pg_get_serial_sequence('memory_revisions', 'revision_id')) AS revision_id
    ), restored AS (
        INSERT INTO personal_memories
            (personal_memory_id, user_id, persona_lineage_id, content, revision_id)
        VALUES (
            :memory_id, :owner_user_id, :persona_lineage_id, :content,
            (SELECT revision_id FROM new_revision)
        )
        ON CONFLICT (personal_memory_id)
        DO UPDATE SET content = EXCLUDED.content, updated_at = now(),
                      revision_id = EXCLUDED.revision_id
        RETURNING personal_memory_id
    ), revision AS (
        {REVISION_INSERT_WITH_ID_AND_REASON}
        SELECT (SELECT revision_id FROM new_revision), 'target_user', personal_memory_id,
               'restored', :content_before, :content, :server_id,
               :owner_user_id, :persona_lineage_id, :actor, :tool_call_id, now(), :reason
        FROM restored
        RETURNING *
    )
    SELECT revision.*,
           (SELECT server_disc_id FROM servers WHERE server_id = :server_id) AS server_disc_id,
           (SELECT user_disc_id FROM users WHERE user_id = :owner_user_id) AS owner_disc_id
    FROM revision
    """
)


# Removes a memory that did not exist before the revision (a creation's), with a revision
# whose content_after is null; `_CURRENT_CONTENT` locked the row just before.
_REMOVE_MEMORY: Final = {
    "server_wide": text(
        f"""
        WITH removed AS (
            DELETE FROM server_memories WHERE server_memory_id = :memory_id
            RETURNING server_memory_id
        ), revision AS (
            {REVISION_INSERT_WITH_REASON}
            SELECT 'server_wide', server_memory_id, 'restored', :content_before, NULL,
                   :server_id, NULL, :persona_lineage_id, :actor, :tool_call_id, now(), :reason
            FROM removed
            RETURNING *
        )
        SELECT revision.*, (SELECT server_disc_id FROM servers WHERE server_id = :server_id)
               AS server_disc_id, NULL AS owner_disc_id
        FROM revision
        """
    ),
    "target_user": text(
        f"""
        WITH removed AS (
            DELETE FROM personal_memories WHERE personal_memory_id = :memory_id
            RETURNING personal_memory_id, user_id
        ), revision AS (
            {REVISION_INSERT_WITH_REASON}
            SELECT 'target_user', personal_memory_id, 'restored', :content_before, NULL,
                   :server_id, user_id, :persona_lineage_id, :actor, :tool_call_id, now(), :reason
            FROM removed
            RETURNING *
        )
        SELECT revision.*,
               (SELECT server_disc_id FROM servers WHERE server_id = :server_id)
               AS server_disc_id,
               (SELECT user_disc_id FROM users WHERE user_id = revision.owner_user_id)
               AS owner_disc_id
        FROM revision
        """
    ),
}


def revision_of(row: Any) -> Revision:
    """A `memory_revisions` row (`SELECT *`, or a statement's `RETURNING *`)."""
    return Revision(
        revision_id=row.revision_id,
        scope=row.scope,
        memory_id=row.memory_id,
        action=row.action,
        content_before=row.content_before,
        content_after=row.content_after,
        server_id=row.server_id,
        owner_user_id=row.owner_user_id,
        persona_lineage_id=row.persona_lineage_id,
        actor_disc_id=row.actor_disc_id,
        tool_call_id=row.tool_call_id,
        occurred_at=row.occurred_at,
        reason=row.reason,
    )


class RevisionStore:
    """`memory_revisions`: a memory's history, and putting a memory back as it was."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def history(self, memory_id: int) -> list[Revision]:
        async with self.engine.connect() as connection:
            result = await connection.execute(_HISTORY, {"memory_id": memory_id})
            return [revision_of(row) for row in result]

    async def texts(self, revision_ids: Collection[int]) -> dict[int, ChangeTexts]:
        """The texts of these revisions, by revision id, in one query; a revision that does
        not exist (the stream of another database, say) is absent."""
        if not revision_ids:
            return {}
        async with self.engine.connect() as connection:
            result = await connection.execute(_TEXTS, {"revision_ids": sorted(set(revision_ids))})
            return {
                row.revision_id: ChangeTexts(
                    content_before=row.content_before,
                    content_after=None if row.content_before is None else row.content_after,
                    erased=row.content_before is None,
                )
                for row in result
            }

    @asynccontextmanager
    async def restoring(
        self, revision_id: int, *, actor: str, tool_call_id: str
    ) -> AsyncIterator[tuple[RestoredMemory | UnchangedMemory | None, AsyncConnection]]:
        """Restores inside a transaction the caller completes (it queues the events first).

        Yields None when the revision does not exist, and UnchangedMemory, having written
        nothing, when the memory already is as it was before the revision.
        """
        async with self.engine.begin() as connection:
            found = (
                await connection.execute(_REVISION, {"revision_id": revision_id})
            ).one_or_none()
            if found is None:
                yield None, connection
                return
            restored = await restore_on(
                connection, revision_of(found), actor=actor, tool_call_id=tool_call_id
            )
            yield restored, connection


async def restore_on(
    connection: AsyncConnection,
    original: Revision,
    *,
    actor: str,
    tool_call_id: str,
    reason: str | None = None,
) -> RestoredMemory | UnchangedMemory:
    """Puts `original`'s memory back as it was before it, in the caller's transaction: the one
    way a memory is put back, for a single restore and for each memory of a revert.

    Writes nothing, and says so (UnchangedMemory), when the memory already is as it was.
    """
    current = (
        await connection.execute(
            _CURRENT_CONTENT[original.scope], {"memory_id": original.memory_id}
        )
    ).one_or_none()
    current_content = None if current is None else str(current.content)
    plan = plan_restore(original.content_before, current_content)
    if isinstance(plan, Unchanged):
        return UnchangedMemory(original.memory_id, current_content)
    params: dict[str, Any] = {
        "memory_id": original.memory_id,
        "server_id": original.server_id,
        "persona_lineage_id": original.persona_lineage_id,
        "content_before": current_content or "",
        "actor": actor,
        "tool_call_id": tool_call_id,
        "reason": reason,
    }
    if isinstance(plan, Remove):
        statement = _REMOVE_MEMORY[original.scope]
    elif original.scope == "server_wide":
        statement = _RESTORE_SERVER_MEMORY
        params["content"] = plan.content
    else:
        statement = _RESTORE_PERSONAL_MEMORY
        params["content"] = plan.content
        params["owner_user_id"] = original.owner_user_id
    row = (await connection.execute(statement, params)).one()
    return RestoredMemory(
        revision=revision_of(row),
        server_disc_id=row.server_disc_id,
        owner_disc_id=row.owner_disc_id,
    )
