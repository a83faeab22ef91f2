"""PostgreSQL: loads the facts of a batch of tool calls and performs the decisions in one
transaction.

This module owns the pipeline's SQL; the outbox and the revisions have modules of their own.
Every statement is SQLAlchemy Core `text()`, compiled once and prepared by psycopg after a
few uses: the ORM stays off the hot path.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final

import orjson
import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import namedtuple_row
from sqlalchemy import TextClause, text
from sqlalchemy.dialects.postgresql import psycopg as psycopg_dialect
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from contracts import MemoryStatus, ResultData, ToolCallRequested, encode_event, rfc3339_utc
from worker.adapters.outbox import (
    _MARK_PUBLISHED,
    OUTBOX_INSERT,
    OutboxRow,
    OutgoingEvent,
    Traceparents,
    events_params,
    outbox_rows,
)
from worker.adapters.revisions import REVISION_INSERT, REVISION_INSERT_WITH_ID
from worker.core.create import ExistingMemory, NewMemory, ScopeKey
from worker.core.idempotency import call_fingerprint
from worker.core.model import (
    DirectoryMember,
    ForbiddenWrite,
    MemoryWrite,
    ServerState,
    StoredUser,
    WrittenMemory,
)

__all__ = [
    "Answer",
    "Claim",
    "LockedOwner",
    "LockedScopes",
    "MemoryStore",
    "PlannedCreation",
    "PlannedWrite",
    "StoredResult",
    "ToolCallTransaction",
    "answers_params",
    "apply_params",
    "claim_params",
    "create_engine",
    "creations_params",
    "psycopg_sql",
    "scopes_params",
]


def psycopg_sql(statement: str | TextClause) -> str:
    """The statement as psycopg takes it (`:name` becomes `%(name)s`), compiled once.

    The pipeline's transaction runs on psycopg's own connection: SQLAlchemy's execution
    layer (a greenlet switch and a result wrapper per statement) is work the hot path does
    not need. SQLAlchemy still owns the pool, the other stores and the migrations.
    """
    clause = text(statement) if isinstance(statement, str) else statement
    return str(clause.compile(dialect=_PSYCOPG))


_PSYCOPG: Final = psycopg_dialect.dialect()  # type: ignore[no-untyped-call]


def create_engine(url: str, *, pool_size: int, lock_timeout_s: float | None = None) -> AsyncEngine:
    """An engine whose pool bounds the worker's database concurrency; with `lock_timeout_s`,
    a statement waiting longer than that for a lock fails (`LockNotAvailable`)."""
    options = (
        {}
        if lock_timeout_s is None
        else {"options": f"-c lock_timeout={lock_timeout_s * 1000:.0f}"}
    )
    return create_async_engine(
        url,
        pool_size=pool_size,
        max_overflow=0,
        pool_pre_ping=False,
        pool_recycle=1800,
        connect_args=options,
    )


@dataclass(frozen=True, slots=True)
class StoredResult:
    """The answer recorded for a tool call, where its first answer went, and the fingerprint
    of that call (None in records from before fingerprints)."""

    status: MemoryStatus
    message: str
    data: ResultData
    tool_name: str
    guild_id: str | None
    channel_id: str
    shard_id: int
    fingerprint: str | None


@dataclass(frozen=True, slots=True)
class Claim:
    """The inbox row is ours (`stored` None), or the call was answered before."""

    stored: StoredResult | None
    state: ServerState | None


# Inbox rows first, in tool_call_id order, so that two workers' batches sharing calls take the
# row locks in the same order; a copy of a call running elsewhere makes this wait, then skip
# (and `_STORED_RESULTS`, a statement of its own, then reads what that one committed).
_CLAIM: Final = psycopg_sql(
    """
    WITH input AS (
        SELECT * FROM json_to_recordset(CAST(:calls AS json)) AS i(
            tool_call_id text, event_id uuid, tool_name text, guild_id text, channel_id text,
            shard_id integer, server_disc_id text, persona_id integer, fingerprint text,
            requested_at timestamptz
        )
    ), claimed AS (
        INSERT INTO tool_call_inbox
            (tool_call_id, event_id, tool_name, guild_id, channel_id, shard_id, fingerprint,
             requested_at)
        SELECT tool_call_id, event_id, tool_name, guild_id, channel_id, shard_id, fingerprint,
               requested_at
        FROM input ORDER BY tool_call_id
        ON CONFLICT (tool_call_id) DO NOTHING
        RETURNING tool_call_id
    )
    SELECT i.tool_call_id, c.tool_call_id IS NOT NULL AS claimed,
           s.server_id, s.server_disc_id,
           p.persona_id, p.server_id AS persona_server_id, p.persona_lineage_id, p.nickname,
           coalesce(sc.self_teaching_enabled, true) AS self_teaching_enabled,
           coalesce(sc.personal_memories_enabled, true) AS personal_memories_enabled,
           coalesce(sc.memory_edit_policy, 'anyone') AS memory_edit_policy
    FROM input AS i
    LEFT JOIN claimed AS c ON c.tool_call_id = i.tool_call_id
    LEFT JOIN servers AS s ON s.server_disc_id = i.server_disc_id
    LEFT JOIN personas AS p ON p.persona_id = i.persona_id
    LEFT JOIN server_configs AS sc ON sc.server_id = s.server_id
    """
)

_STORED_RESULTS: Final = psycopg_sql(
    """
    SELECT tool_call_id, result, tool_name, guild_id, channel_id, shard_id, fingerprint
    FROM tool_call_inbox WHERE tool_call_id = ANY(:tool_call_ids)
    """
)

_DIRECTORIES: Final = psycopg_sql(
    """
    SELECT m.server_id, m.user_disc_id, m.username, m.display_name, m.global_name,
           u.user_nickname, m.is_bot
    FROM guild_members AS m
    LEFT JOIN users AS u ON u.user_disc_id = m.user_disc_id
    WHERE m.server_id = ANY(:server_ids)
    ORDER BY m.server_id, m.user_disc_id
    """
)

_USER: Final = psycopg_sql(
    """
    SELECT u.user_id, u.user_disc_id, u.privacy_level,
           EXISTS (
               SELECT 1 FROM personalization_blacklist AS b
               WHERE b.server_id = :server_id AND b.user_id = u.user_id
           ) AS blacklisted_here
    FROM users AS u WHERE u.user_disc_id = :user_disc_id
    """
)

# The writes of a batch, each matched by its whole scope and changed in this one statement,
# with its revision row. Rows are locked in id order (no deadlock between two workers'
# batches), and a change of the same memory by another transaction makes the lock wait, then
# read the committed content: every revision's `content_before` is the previous revision's
# `content_after`. The memory ids of one statement are distinct (see `_waves`).
# A write `only_own` changes its row only when the row's `user_id` (a server memory's teacher,
# a personal memory's owner) is the actor's `users` row; a row matched but not changed comes
# back with no revision, and a write that matched nothing does not come back.
_APPLY: Final = psycopg_sql(
    f"""
    WITH input AS (
        SELECT * FROM json_to_recordset(CAST(:writes AS json)) AS i(
            ord integer, scope text, memory_id bigint, server_id integer, lineage bigint,
            owner_user_id integer, content text, actor text, tool_call_id text,
            only_own boolean
        )
    ), server_targets AS (
        SELECT i.ord, m.content AS content_before, m.persona_lineage_id AS row_lineage,
               m.user_id AS row_user_id
        FROM input AS i JOIN server_memories AS m
          ON i.scope = 'server_wide' AND m.server_memory_id = i.memory_id
         AND m.server_id = i.server_id AND m.persona_lineage_id = i.lineage
        ORDER BY m.server_memory_id
        FOR UPDATE OF m
    ), personal_targets AS (
        SELECT i.ord, m.content AS content_before, m.persona_lineage_id AS row_lineage,
               m.user_id AS row_user_id
        FROM input AS i JOIN personal_memories AS m
          ON i.scope = 'target_user' AND m.personal_memory_id = i.memory_id
         AND m.user_id = i.owner_user_id AND m.persona_lineage_id IN (i.lineage, 0)
        ORDER BY m.personal_memory_id
        FOR UPDATE OF m
    ), matched AS (
        SELECT t.ord, t.content_before, t.row_lineage, i.scope, i.memory_id, i.content,
               CASE WHEN i.only_own THEN coalesce(
                   t.row_user_id
                   = (SELECT u.user_id FROM users AS u WHERE u.user_disc_id = i.actor),
                   false
               ) ELSE true END AS allowed
        FROM (SELECT * FROM server_targets UNION ALL SELECT * FROM personal_targets) AS t
        JOIN input AS i ON i.ord = t.ord
    ), targets AS (
        SELECT * FROM matched WHERE allowed
    ), server_updated AS (
        UPDATE server_memories AS m SET content = t.content, updated_at = now()
        FROM targets AS t
        WHERE t.scope = 'server_wide' AND t.content IS NOT NULL
          AND m.server_memory_id = t.memory_id
        RETURNING t.ord
    ), server_deleted AS (
        DELETE FROM server_memories AS m USING targets AS t
        WHERE t.scope = 'server_wide' AND t.content IS NULL AND m.server_memory_id = t.memory_id
        RETURNING t.ord
    ), personal_updated AS (
        UPDATE personal_memories AS m SET content = t.content, updated_at = now()
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
        {REVISION_INSERT}
        SELECT i.scope, i.memory_id,
               CASE WHEN i.content IS NULL THEN 'deleted' ELSE 'updated' END,
               t.content_before, i.content, i.server_id,
               CASE WHEN i.scope = 'target_user' THEN i.owner_user_id END,
               t.row_lineage, i.actor, i.tool_call_id, now()
        FROM changed AS c JOIN input AS i ON i.ord = c.ord JOIN targets AS t ON t.ord = c.ord
        ORDER BY i.ord
        RETURNING revision_id, tool_call_id, content_before, persona_lineage_id
    )
    SELECT revision_id, tool_call_id, content_before, persona_lineage_id FROM revisions
    UNION ALL
    SELECT NULL, i.tool_call_id, NULL, NULL
    FROM matched AS m JOIN input AS i ON i.ord = m.ord
    WHERE NOT m.allowed
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


# The create tool's race freedom (docs/behaviour.md, create step 7): a creation locks its scope's
# anchor row (the server, or the owner's users row) before its scope is read, so that two
# transactions creating in one scope take turns, the second reading what the first added.
# NO KEY UPDATE: the foreign-key checks of other inserts (KEY SHARE) are not blocked. Servers
# before users, each in id order, so that two workers' batches never wait on each other in a
# circle. Each lock is a statement of its own, before the read: in READ COMMITTED a
# statement's snapshot is taken when it starts, so a read in the locking statement itself
# would not see what the transaction it waited for committed.
_LOCK_SERVERS: Final = psycopg_sql(
    """
    SELECT server_id FROM servers WHERE server_id = ANY(:server_ids)
    ORDER BY server_id FOR NO KEY UPDATE
    """
)

_LOCK_OWNERS: Final = psycopg_sql(
    """
    SELECT u.user_id, u.user_disc_id, u.privacy_level,
           ARRAY(
               SELECT b.server_id FROM personalization_blacklist AS b WHERE b.user_id = u.user_id
           ) AS blacklisted_in
    FROM users AS u WHERE u.user_disc_id = ANY(:owner_disc_ids)
    ORDER BY u.user_id FOR NO KEY UPDATE OF u
    """
)

# Every memory of the batch's scopes, for the core's duplicate check and count. The limit
# keeps a scope small (25 by default); one filled from outside is read whole all the same,
# so that a duplicate is found wherever it is.
_SCOPE_CONTENTS: Final = psycopg_sql(
    """
    WITH scopes AS (
        SELECT * FROM json_to_recordset(CAST(:scopes AS json)) AS s(
            ord integer, scope text, server_id integer, owner_disc_id text, lineage bigint
        )
    )
    SELECT s.ord, m.server_memory_id AS memory_id, m.content
    FROM scopes AS s JOIN server_memories AS m
      ON s.scope = 'server_wide' AND m.server_id = s.server_id
     AND m.persona_lineage_id = s.lineage
    UNION ALL
    SELECT s.ord, m.personal_memory_id, m.content
    FROM scopes AS s
    JOIN users AS u ON s.scope = 'target_user' AND u.user_disc_id = s.owner_disc_id
    JOIN personal_memories AS m
      ON m.user_id = u.user_id AND m.persona_lineage_id IN (s.lineage, 0)
    """
)

# Ids for the batch's new memories and their revisions, taken with the read, so that the
# inserts need no answer back and travel with COMMIT. A creation refused after all leaves a
# gap in both sequences, as a rolled-back insert would.
_NEW_IDS: Final = psycopg_sql(
    """
    SELECT nextval('memory_id_seq') AS memory_id,
           nextval(pg_get_serial_sequence('memory_revisions', 'revision_id')) AS revision_id
    FROM generate_series(1, :count)
    """
)

# The batch's new memories and their `created` revisions (content_before ''); the teacher of
# a server memory is the triggerer's users row, when there is one.
_CREATE: Final = psycopg_sql(
    f"""
    WITH input AS (
        SELECT * FROM json_to_recordset(CAST(:memories AS json)) AS i(
            scope text, memory_id bigint, revision_id bigint, server_id integer,
            persona_id integer, lineage bigint, owner_user_id integer, content text,
            actor text, tool_call_id text
        )
    ), server_created AS (
        INSERT INTO server_memories
            (server_memory_id, server_id, persona_id, persona_lineage_id, user_id, content)
        SELECT i.memory_id, i.server_id, i.persona_id, i.lineage, teacher.user_id, i.content
        FROM input AS i LEFT JOIN users AS teacher ON teacher.user_disc_id = i.actor
        WHERE i.scope = 'server_wide'
    ), personal_created AS (
        INSERT INTO personal_memories (personal_memory_id, user_id, persona_lineage_id, content)
        SELECT memory_id, owner_user_id, lineage, content FROM input
        WHERE scope = 'target_user'
    )
    {REVISION_INSERT_WITH_ID}
    SELECT revision_id, scope, memory_id, 'created', '', content, server_id,
           CASE WHEN scope = 'target_user' THEN owner_user_id END, lineage, actor,
           tool_call_id, now()
    FROM input
    """
)

_MARK_PUBLISHED_SQL: Final = psycopg_sql(_MARK_PUBLISHED)
_BEGIN: Final = "BEGIN"
_COMMIT: Final = "COMMIT"
_ROLLBACK: Final = "ROLLBACK"

# Every result and event of a batch: the last statement, sent with COMMIT. It returns
# nothing, so that the two travel in one round trip. `completed_at` is the clock's time, not
# the transaction's start: with the request's time it is what the user waited.
_FINISH: Final = psycopg_sql(
    f"""
    WITH answered AS (
        UPDATE tool_call_inbox AS inbox
        SET status = a.status, result = a.result, completed_at = clock_timestamp()
        FROM json_to_recordset(CAST(:answers AS json)) AS a(
            tool_call_id text, status text, result jsonb
        )
        WHERE inbox.tool_call_id = a.tool_call_id
    )
    {OUTBOX_INSERT}
    """
)


@dataclass(frozen=True, slots=True)
class Answer:
    """A call's result, stored with its inbox row so that a second delivery repeats it."""

    tool_call_id: str
    status: MemoryStatus
    message: str
    data: ResultData


@dataclass(frozen=True, slots=True)
class PlannedWrite:
    write: MemoryWrite
    actor: str
    tool_call_id: str


@dataclass(frozen=True, slots=True)
class PlannedCreation:
    memory: NewMemory
    actor: str
    tool_call_id: str


@dataclass(frozen=True, slots=True)
class LockedOwner:
    """An owner's users row, locked for the transaction, and where they are excluded from
    personalization."""

    user_id: int
    user_disc_id: str
    privacy_level: int
    blacklisted_in: frozenset[int]

    def stored(self, server_id: int) -> StoredUser:
        return StoredUser(
            user_id=self.user_id,
            user_disc_id=self.user_disc_id,
            privacy_level=self.privacy_level,
            blacklisted_here=server_id in self.blacklisted_in,
        )


@dataclass(frozen=True, slots=True)
class LockedScopes:
    """What a batch's creations are decided over, read after their scopes were locked."""

    owners: dict[str, LockedOwner]  # by Discord id; an owner with no users row is absent
    contents: dict[ScopeKey, list[ExistingMemory]]
    new_ids: list[tuple[int, int]]  # (memory_id, revision_id), one pair per creation asked


def _waves(writes: Sequence[PlannedWrite]) -> list[list[int]]:
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


# Batches travel as one JSON parameter each (json_to_recordset): encoding and parsing JSON is
# C on both sides, where psycopg dumps array parameters element by element in Python.


def claim_params(calls: Sequence[ToolCallRequested]) -> dict[str, str]:
    return {
        "calls": orjson.dumps(
            [
                {
                    "tool_call_id": call.tool_call_id,
                    "event_id": str(call.event_id),
                    "tool_name": call.tool_name,
                    "guild_id": call.context.guild_id,
                    "channel_id": call.context.channel_id,
                    "shard_id": call.context.shard_id,
                    "server_disc_id": call.context.server_disc_id,
                    "persona_id": call.context.persona_id,
                    "fingerprint": call_fingerprint(call),
                    "requested_at": rfc3339_utc(call.occurred_at),
                }
                for call in calls
            ]
        ).decode()
    }


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
                }
                for position in positions
            ]
        ).decode()
    }


def scopes_params(scopes: Sequence[ScopeKey]) -> dict[str, str]:
    return {
        "scopes": orjson.dumps(
            [
                {
                    "ord": position,
                    "scope": key.scope,
                    "server_id": key.server_id,
                    "owner_disc_id": key.owner_disc_id,
                    "lineage": key.lineage,
                }
                for position, key in enumerate(scopes)
            ]
        ).decode()
    }


def creations_params(creations: Sequence[PlannedCreation]) -> dict[str, str]:
    return {
        "memories": orjson.dumps(
            [
                {
                    "scope": planned.memory.scope,
                    "memory_id": planned.memory.memory_id,
                    "revision_id": planned.memory.revision_id,
                    "server_id": planned.memory.server_id,
                    "persona_id": planned.memory.persona_id,
                    "lineage": planned.memory.persona_lineage_id,
                    "owner_user_id": planned.memory.owner_user_id,
                    "content": planned.memory.content,
                    "actor": planned.actor,
                    "tool_call_id": planned.tool_call_id,
                }
                for planned in creations
            ]
        ).decode()
    }


class ToolCallTransaction:
    """One transaction for a batch of tool calls: every read and write of the pipeline.

    `traceparents`: the trace context of each call (by tool_call_id), kept with its events.
    """

    def __init__(
        self, connection: psycopg.AsyncConnection[Any], traceparents: Traceparents | None = None
    ) -> None:
        self._connection = connection
        self._traceparents: Traceparents = traceparents or {}
        # Rows are named tuples: columns read as attributes, as the statements name them.
        self._cursor: psycopg.AsyncCursor[Any] = self._new_cursor()

    def _new_cursor(self) -> psycopg.AsyncCursor[Any]:
        return self._connection.cursor(row_factory=namedtuple_row)

    async def _all(self, statement: str, params: dict[str, Any]) -> list[Any]:
        await self._cursor.execute(statement, params)
        return await self._cursor.fetchall()

    async def _one(self, statement: str, **params: Any) -> Any:
        await self._cursor.execute(statement, params)
        return await self._cursor.fetchone()

    async def claim(self, calls: Sequence[ToolCallRequested]) -> list[Claim]:
        """Writes the inbox rows first, with each call's fingerprint; calls whose id has a
        record come back with it (the record's result and the fingerprint of its call).

        The tool_call_ids of `calls` are distinct.
        """
        rows = await self._all(_CLAIM, claim_params(calls))
        by_id = {row.tool_call_id: row for row in rows}
        answered_before = [
            call.tool_call_id for call in calls if not by_id[call.tool_call_id].claimed
        ]
        stored = await self.stored_results(answered_before) if answered_before else {}
        claims = []
        for call in calls:
            row = by_id[call.tool_call_id]
            if not row.claimed:
                claims.append(Claim(stored=stored[call.tool_call_id], state=None))
                continue
            state = None
            if row.server_id is not None and row.persona_id is not None:
                state = ServerState(
                    server_id=row.server_id,
                    server_disc_id=row.server_disc_id,
                    persona_id=row.persona_id,
                    persona_server_id=row.persona_server_id,
                    persona_lineage_id=row.persona_lineage_id,
                    persona_nickname=row.nickname,
                    self_teaching_enabled=row.self_teaching_enabled,
                    personal_memories_enabled=row.personal_memories_enabled,
                    memory_edit_policy=row.memory_edit_policy,
                )
            claims.append(Claim(stored=None, state=state))
        return claims

    async def stored_results(self, tool_call_ids: Sequence[str]) -> dict[str, StoredResult]:
        rows = await self._all(_STORED_RESULTS, {"tool_call_ids": list(tool_call_ids)})
        found: dict[str, StoredResult] = {}
        for row in rows:
            if row.result is None:
                # Unreachable by design: the row and its result commit together.
                raise LookupError(f"tool call {row.tool_call_id} has no stored result")
            result = row.result
            found[row.tool_call_id] = StoredResult(
                status=MemoryStatus(result["status"]),
                message=result["message"],
                data=ResultData.model_validate_json(orjson.dumps(result.get("data") or {})),
                tool_name=row.tool_name,
                guild_id=row.guild_id,
                channel_id=row.channel_id,
                shard_id=row.shard_id,
                fingerprint=row.fingerprint,
            )
        return found

    async def load_directory(self, server_id: int) -> list[DirectoryMember]:
        return (await self.load_directories([server_id]))[server_id]

    async def load_directories(self, server_ids: Sequence[int]) -> dict[int, list[DirectoryMember]]:
        """The current members of each server, in one statement."""
        directories: dict[int, list[DirectoryMember]] = {server_id: [] for server_id in server_ids}
        for row in await self._all(_DIRECTORIES, {"server_ids": list(server_ids)}):
            directories[row.server_id].append(
                DirectoryMember(
                    user_disc_id=row.user_disc_id,
                    username=row.username,
                    display_name=row.display_name,
                    global_name=row.global_name,
                    user_nickname=row.user_nickname,
                    is_bot=row.is_bot,
                )
            )
        return directories

    async def lock_scopes(self, scopes: Sequence[ScopeKey], *, new_ids: int) -> LockedScopes:
        """Locks the scopes' anchors, then reads the scopes, their owners and `new_ids` pairs of
        ids: four statements in one round trip (pipelined), each read after the locks."""
        server_ids = sorted({key.server_id for key in scopes if key.server_id is not None})
        owner_ids = sorted({key.owner_disc_id for key in scopes if key.owner_disc_id is not None})
        if server_ids:
            await self._new_cursor().execute(_LOCK_SERVERS, {"server_ids": server_ids})
        owners_read = self._new_cursor()
        if owner_ids:
            await owners_read.execute(_LOCK_OWNERS, {"owner_disc_ids": owner_ids})
        contents_read = self._new_cursor()
        await contents_read.execute(_SCOPE_CONTENTS, scopes_params(scopes))
        ids_read = self._new_cursor()
        await ids_read.execute(_NEW_IDS, {"count": new_ids})

        owners = {
            row.user_disc_id: LockedOwner(
                user_id=row.user_id,
                user_disc_id=row.user_disc_id,
                privacy_level=row.privacy_level,
                blacklisted_in=frozenset(row.blacklisted_in),
            )
            for row in (await owners_read.fetchall() if owner_ids else [])
        }
        contents: dict[ScopeKey, list[ExistingMemory]] = {key: [] for key in scopes}
        for row in await contents_read.fetchall():
            contents[scopes[row.ord]].append(ExistingMemory(row.memory_id, row.content))
        pairs = [(row.memory_id, row.revision_id) for row in await ids_read.fetchall()]
        return LockedScopes(owners=owners, contents=contents, new_ids=pairs)

    async def create(self, creations: Sequence[PlannedCreation]) -> None:
        """Inserts the new memories with their revisions. Sent, not awaited: it goes with
        COMMIT, and its errors are the commit's."""
        if creations:
            await self._new_cursor().execute(_CREATE, creations_params(creations))

    async def load_user(self, user_disc_id: str, *, server_id: int) -> StoredUser | None:
        row = await self._one(_USER, user_disc_id=user_disc_id, server_id=server_id)
        if row is None:
            return None
        return StoredUser(
            user_id=row.user_id,
            user_disc_id=row.user_disc_id,
            privacy_level=row.privacy_level,
            blacklisted_here=row.blacklisted_here,
        )

    async def apply(
        self, writes: Sequence[PlannedWrite]
    ) -> list[WrittenMemory | ForbiddenWrite | None]:
        """The scoped writes and their revision rows; None where no memory matched, and
        ForbiddenWrite where the edit policy kept the matched memory from the actor."""
        written: list[WrittenMemory | ForbiddenWrite | None] = [None] * len(writes)
        for wave in _waves(writes):
            rows = await self._all(_APPLY, apply_params(writes, wave))
            position_of = {writes[position].tool_call_id: position for position in wave}
            for row in rows:
                if row.revision_id is None:
                    written[position_of[row.tool_call_id]] = ForbiddenWrite()
                    continue
                written[position_of[row.tool_call_id]] = WrittenMemory(
                    revision_id=row.revision_id,
                    content_before=row.content_before,
                    persona_lineage_id=row.persona_lineage_id,
                )
        return written

    async def in_other_scope(self, write: MemoryWrite, *, participant_ids: Sequence[str]) -> bool:
        """Whether the id names a memory of the other scope that this call could reach."""
        if write.scope == "server_wide":
            row = await self._one(
                _PERSONAL_MEMORY_WITHIN_REACH,
                memory_id=write.memory_id,
                persona_lineage_id=write.persona_lineage_id,
                participant_ids=list(participant_ids),
                server_id=write.server_id,
            )
        else:
            row = await self._one(
                _SERVER_MEMORY_WITHIN_REACH,
                memory_id=write.memory_id,
                server_id=write.server_id,
                persona_lineage_id=write.persona_lineage_id,
            )
        assert row is not None  # SELECT EXISTS returns one row
        return bool(row[0])

    async def finish(
        self, answers: Sequence[Answer], events: Sequence[OutgoingEvent]
    ) -> list[OutboxRow]:
        """Stores the results for idempotency and queues the events, in this transaction.

        Sent, not awaited: the statement goes with COMMIT, and its errors are the commit's.
        """
        bodies = [encode_event(outgoing.event) for outgoing in events]
        traceparents = self._traceparents
        await self._cursor.execute(
            _FINISH, {**events_params(events, bodies, traceparents), **answers_params(answers)}
        )
        return outbox_rows(events, bodies, traceparents)

    async def mark_published(self, event_ids: Sequence[uuid.UUID]) -> None:
        """Earlier calls' outbox rows, confirmed by the broker since: marked in this commit."""
        if event_ids:
            await self._cursor.execute(_MARK_PUBLISHED_SQL, {"event_ids": list(event_ids)})


def answers_params(answers: Sequence[Answer]) -> dict[str, str]:
    return {"answers": orjson.dumps([_stored_answer(answer) for answer in answers]).decode()}


def _stored_answer(answer: Answer) -> dict[str, Any]:
    result = {
        "status": answer.status.value,
        "message": answer.message,
        "data": answer.data.model_dump(mode="json"),
    }
    return {
        "tool_call_id": answer.tool_call_id,
        "status": answer.status.value,
        "result": _without_nul(result),
    }


def _without_nul(value: Any) -> Any:
    """jsonb refuses NUL, which a label from the envelope may carry: stored as U+FFFD."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {key: _without_nul(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_without_nul(item) for item in value]
    return value


# A held connection goes back to the pool after this long, as the pool's own recycling would.
_HELD_FOR_S: Final = 1800.0


@dataclass(slots=True)
class _HeldConnection:
    """A pooled connection kept between transactions, in autocommit (BEGIN is sent by hand)."""

    pooled: AsyncConnection
    driver: psycopg.AsyncConnection[Any]
    since: float


class MemoryStore:
    """The database of the pipeline: hands out one transaction per batch of tool calls.

    Between transactions it keeps its connections out of the pool: a checkout and a return
    each, and the switch to autocommit and back, cost more than the rest of a one-call
    transaction's client side. At most as many are kept as transactions ran at once.
    """

    def __init__(self, engine: AsyncEngine, *, held_for_s: float = _HELD_FOR_S) -> None:
        self.engine = engine
        self._held_for_s = held_for_s
        self._idle: list[_HeldConnection] = []

    @asynccontextmanager
    async def transaction(
        self, traceparents: Traceparents | None = None
    ) -> AsyncIterator[ToolCallTransaction]:
        """Commits when the block ends normally, rolls back when it raises; `traceparents`:
        the calls' trace contexts, for their outbox rows."""
        async with self.driver_transaction() as connection:
            yield ToolCallTransaction(connection, traceparents)

    @asynccontextmanager
    async def driver_transaction(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A psycopg connection in a transaction, committed when the block ends."""
        held = self._idle.pop() if self._idle else await self._hold()
        try:
            async with pipelined_transaction(held.driver):
                yield held.driver
        except BaseException:
            # Whatever failed, the connection goes back (or, lost, away) rather than being
            # trusted again: the retry takes a fresh one.
            await _let_go(held)
            raise
        if time.monotonic() - held.since > self._held_for_s:
            await _let_go(held)
        else:
            self._idle.append(held)

    async def _hold(self) -> _HeldConnection:
        pooled = await self.engine.connect()
        try:
            driver = (await pooled.get_raw_connection()).driver_connection
            assert isinstance(driver, psycopg.AsyncConnection)
            await driver.set_autocommit(True)
        except BaseException:
            await pooled.close()
            raise
        return _HeldConnection(pooled, driver, time.monotonic())

    async def release(self) -> None:
        """Gives the kept connections back to the pool."""
        while self._idle:
            await _let_go(self._idle.pop())

    async def close(self) -> None:
        await self.release()
        await self.engine.dispose()


async def _let_go(held: _HeldConnection) -> None:
    """Back to the pool as the pool lent it; a lost connection is discarded instead."""
    driver = held.driver
    try:
        if not driver.closed:
            await driver.set_autocommit(False)
    except psycopg.Error:
        await driver.close()
    if driver.closed:
        await held.pooled.invalidate()
    await held.pooled.close()


@asynccontextmanager
async def pipelined_transaction(driver: psycopg.AsyncConnection[Any]) -> AsyncIterator[None]:
    """A transaction whose BEGIN travels with the first statement and COMMIT with the last.

    In pipeline mode, statements whose rows are not read (BEGIN, the mark, FINISH, COMMIT) go
    with the next round trip. psycopg's `transaction()` would wait for BEGIN, and sync before
    COMMIT: three round trips of seven per batch. Hence BEGIN and COMMIT sent by hand, on a
    connection in autocommit, so that psycopg adds none of its own.
    """
    if not driver.autocommit:
        raise ValueError("a pipelined transaction needs a connection in autocommit")
    try:
        async with driver.pipeline():
            await driver.execute(_BEGIN)
            yield
            await driver.execute(_COMMIT)
            # Leaving the pipeline syncs: COMMIT's answer, or the first error of the batch.
    except BaseException:
        if not driver.closed and driver.info.transaction_status != TransactionStatus.IDLE:
            try:
                await driver.execute(_ROLLBACK)
            except psycopg.Error:
                await driver.close()  # the pool then discards it
        raise
