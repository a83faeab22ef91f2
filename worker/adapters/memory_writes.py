"""The update tool's writes: a batch's changes and deletions of memories, each with its
revision, and whether a memory id that matched nothing names one of the other scope.
`PostgresMemoryWrites` implements `worker.ports.MemoryWrites`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import orjson
import psycopg

from infra.storage.engine import fetch_all, fetch_one, psycopg_sql
from infra.storage.revisions import REVISION_INSERT_WITH_ID
from worker.core.model import ForbiddenWrite, MemoryWrite, StaleWrite, WrittenMemory
from worker.core.records import PlannedWrite

__all__ = ["APPLY", "PostgresMemoryWrites", "apply_params", "write_waves"]

# The writes of a batch, each matched by its whole scope and changed in this one statement,
# with its revision row. Rows are locked in id order (no deadlock between two workers'
# batches), and a change of the same memory by another transaction makes the lock wait, then
# read the committed row: every revision's `content_before` is the previous revision's
# `content_after`, and the row's `revision_id` is the latest one. The memory ids of one
# statement are distinct (see `write_waves`).
# A write `only_own` changes its row only when the row's `user_id` (a server memory's teacher,
# a personal memory's owner) is the actor's `users` row; a write with a `seen_revision_id`
# only while the row is still at that revision (compared on the locked row, so that two
# writes built on one revision cannot both pass). The revision's id is taken before the
# change, so that the row carries it. Every write that matched comes back with its
# `outcome`: `written` (with its revision), `forbidden` (nothing of the row), or `stale`
# (the row's revision and content now); a write that matched nothing does not come back.
APPLY: Final = psycopg_sql(
    f"""
    WITH input AS (
        SELECT * FROM json_to_recordset(CAST(:writes AS json)) AS i(
            ord integer, scope text, memory_id bigint, server_id integer, lineage bigint,
            owner_user_id integer, content text, actor text, tool_call_id text,
            only_own boolean, seen_revision_id bigint
        )
    ), server_targets AS (
        SELECT i.ord, m.content AS content_before, m.persona_lineage_id AS row_lineage,
               m.user_id AS row_user_id, m.revision_id AS row_revision_id
        FROM input AS i JOIN server_memories AS m
          ON i.scope = 'server_wide' AND m.server_memory_id = i.memory_id
         AND m.server_id = i.server_id AND m.persona_lineage_id = i.lineage
        ORDER BY m.server_memory_id
        FOR UPDATE OF m
    ), personal_targets AS (
        SELECT i.ord, m.content AS content_before, m.persona_lineage_id AS row_lineage,
               m.user_id AS row_user_id, m.revision_id AS row_revision_id
        FROM input AS i JOIN personal_memories AS m
          ON i.scope = 'target_user' AND m.personal_memory_id = i.memory_id
         AND m.user_id = i.owner_user_id AND m.persona_lineage_id IN (i.lineage, 0)
        ORDER BY m.personal_memory_id
        FOR UPDATE OF m
    ), matched AS (
        SELECT t.ord, t.content_before, t.row_lineage, t.row_revision_id, i.scope,
               i.memory_id, i.content,
               CASE WHEN i.only_own THEN coalesce(
                   t.row_user_id
                   = (SELECT u.user_id FROM users AS u WHERE u.user_disc_id = i.actor),
                   false
               ) ELSE true END AS allowed,
               coalesce(i.seen_revision_id = t.row_revision_id, true) AS unchanged
        FROM (SELECT * FROM server_targets UNION ALL SELECT * FROM personal_targets) AS t
        JOIN input AS i ON i.ord = t.ord
    ), targets AS (
        -- In the batch's order, as the revisions were before their ids were taken here.
        SELECT w.*,
               nextval(pg_get_serial_sequence('memory_revisions', 'revision_id'))
               AS revision_id
        FROM (SELECT * FROM matched WHERE allowed AND unchanged ORDER BY ord) AS w
    ), server_updated AS (
        UPDATE server_memories AS m
        SET content = t.content, updated_at = now(), revision_id = t.revision_id
        FROM targets AS t
        WHERE t.scope = 'server_wide' AND t.content IS NOT NULL
          AND m.server_memory_id = t.memory_id
        RETURNING t.ord
    ), server_deleted AS (
        DELETE FROM server_memories AS m USING targets AS t
        WHERE t.scope = 'server_wide' AND t.content IS NULL AND m.server_memory_id = t.memory_id
        RETURNING t.ord
    ), personal_updated AS (
        UPDATE personal_memories AS m
        SET content = t.content, updated_at = now(), revision_id = t.revision_id
        FROM targets AS t
        WHERE t.scope = 'target_user' AND t.content IS NOT NULL
          AND m.personal_memory_id = t.memory_id
        RETURNING t.ord
    ), personal_deleted AS (
        DELETE FROM personal_memories AS m USING targets AS t
        WHERE t.scope = 'target_user' AND t.content IS NULL
          AND m.personal_memory_id = t.memory_id
        RETURNING t.ord
    ), changed AS (
        SELECT ord FROM server_updated UNION ALL SELECT ord FROM server_deleted
        UNION ALL SELECT ord FROM personal_updated UNION ALL SELECT ord FROM personal_deleted
    ), revisions AS (
        {REVISION_INSERT_WITH_ID}
        SELECT t.revision_id, i.scope, i.memory_id,
               CASE WHEN i.content IS NULL THEN 'deleted' ELSE 'updated' END,
               t.content_before, i.content, i.server_id,
               CASE WHEN i.scope = 'target_user' THEN i.owner_user_id END,
               t.row_lineage, i.actor, i.tool_call_id, now()
        FROM changed AS c JOIN input AS i ON i.ord = c.ord JOIN targets AS t ON t.ord = c.ord
        ORDER BY i.ord
        RETURNING revision_id, tool_call_id, content_before, persona_lineage_id
    )
    SELECT 'written' AS outcome, revision_id, tool_call_id, content_before, persona_lineage_id
    FROM revisions
    UNION ALL
    SELECT CASE WHEN m.allowed THEN 'stale' ELSE 'forbidden' END, m.row_revision_id,
           i.tool_call_id, CASE WHEN m.allowed THEN m.content_before END, NULL
    FROM matched AS m JOIN input AS i ON i.ord = m.ord
    WHERE NOT (m.allowed AND m.unchanged)
    """
)

# "Within reach" (docs/behaviour.md, update step 8): only memories the caller could reach by calling
# again are hinted at; anything else stays unmentioned.
_PERSONAL_MEMORY_WITHIN_REACH: Final = psycopg_sql(
    """
    SELECT EXISTS (
        SELECT 1 FROM personal_memories AS pm JOIN users AS u ON u.user_id = pm.user_id
        WHERE pm.personal_memory_id = :memory_id
          AND pm.persona_lineage_id IN (:persona_lineage_id, 0)
          AND (
              u.user_disc_id = ANY(:participant_ids)
              OR EXISTS (
                  SELECT 1 FROM guild_members AS gm
                  WHERE gm.server_id = :server_id AND gm.user_disc_id = u.user_disc_id
              )
          )
    )
    """
)

_SERVER_MEMORY_WITHIN_REACH: Final = psycopg_sql(
    """
    SELECT EXISTS (
        SELECT 1 FROM server_memories
        WHERE server_memory_id = :memory_id AND server_id = :server_id
          AND persona_lineage_id = :persona_lineage_id
    )
    """
)


class PostgresMemoryWrites:
    """The update tool's writes, on a batch's cursor."""

    __slots__ = ("_cursor",)

    def __init__(self, cursor: psycopg.AsyncCursor[Any]) -> None:
        self._cursor = cursor

    async def apply(
        self, writes: Sequence[PlannedWrite]
    ) -> list[WrittenMemory | ForbiddenWrite | StaleWrite | None]:
        """The scoped writes and their revision rows; None where no memory matched,
        ForbiddenWrite where the edit policy kept the matched memory from the actor, and
        StaleWrite where it changed since the revision the LLM was shown."""
        written: list[WrittenMemory | ForbiddenWrite | StaleWrite | None] = [None] * len(writes)
        for wave in write_waves(writes):
            rows = await fetch_all(self._cursor, APPLY, apply_params(writes, wave))
            position_of = {writes[position].tool_call_id: position for position in wave}
            for row in rows:
                position = position_of[row.tool_call_id]
                if row.outcome == "forbidden":
                    written[position] = ForbiddenWrite()
                elif row.outcome == "stale":
                    written[position] = StaleWrite(
                        current_revision_id=row.revision_id, current_content=row.content_before
                    )
                else:
                    written[position] = WrittenMemory(
                        revision_id=row.revision_id,
                        content_before=row.content_before,
                        persona_lineage_id=row.persona_lineage_id,
                    )
        return written

    async def in_other_scope(self, write: MemoryWrite, *, participant_ids: Sequence[str]) -> bool:
        """Whether the id names a memory of the other scope that this call could reach."""
        if write.scope == "server_wide":
            row = await fetch_one(
                self._cursor,
                _PERSONAL_MEMORY_WITHIN_REACH,
                memory_id=write.memory_id,
                persona_lineage_id=write.persona_lineage_id,
                participant_ids=list(participant_ids),
                server_id=write.server_id,
            )
        else:
            row = await fetch_one(
                self._cursor,
                _SERVER_MEMORY_WITHIN_REACH,
                memory_id=write.memory_id,
                server_id=write.server_id,
                persona_lineage_id=write.persona_lineage_id,
            )
        assert row is not None  # SELECT EXISTS returns one row
        return bool(row[0])


def write_waves(writes: Sequence[PlannedWrite]) -> list[list[int]]:
    """Positions of `writes`, in statements whose memory ids are distinct, order kept.

    A second change of one memory in a batch goes in the next statement, so that it sees
    the first one's result, as it would have in a transaction of its own.
    """
    waves: list[list[int]] = []
    seen: dict[int, int] = {}
    for position, planned in enumerate(writes):
        wave = seen.get(planned.write.memory_id, -1) + 1
        seen[planned.write.memory_id] = wave
        if wave == len(waves):
            waves.append([])
        waves[wave].append(position)
    return waves


def apply_params(writes: Sequence[PlannedWrite], positions: Sequence[int]) -> dict[str, str]:
    return {
        "writes": orjson.dumps(
            [
                {
                    "ord": position,
                    "scope": writes[position].write.scope,
                    "memory_id": writes[position].write.memory_id,
                    "server_id": writes[position].write.server_id,
                    "lineage": writes[position].write.persona_lineage_id,
                    "owner_user_id": writes[position].write.owner_user_id,
                    "content": writes[position].write.content,
                    "actor": writes[position].actor,
                    "tool_call_id": writes[position].tool_call_id,
                    "only_own": writes[position].write.only_own,
                    "seen_revision_id": writes[position].write.seen_revision_id,
                }
                for position in positions
            ]
        ).decode()
    }
