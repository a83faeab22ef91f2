"""The SQL of data requests: a request's row (`data_requests`), the erasure of a user or of a
server (every store, in one transaction that locks the subject first), and a user's export.

Each request runs in transactions of its own, never batched with tool calls. The erasure
takes the subject's anchor row first (`users` FOR UPDATE, `servers` FOR UPDATE), the row the
create tool locks (`FOR NO KEY UPDATE`) before it reads a scope: a creation commits either
before the erasure, and is erased, or after it, and sees what it left.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC
from typing import Any, Final

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from contracts import DataRequestRequested, MemoryStatus
from contracts.data_requests import (
    ExportDocument,
    ExportedMembership,
    ExportedMemory,
    ExportedRevision,
    ExportedUser,
    Receipt,
    RefusalReason,
    TaughtMemory,
)
from worker.adapters.outbox import queue_events
from worker.core.data_requests import ERASED_ACTOR, ErasureCounts, Notice
from worker.core.outgoing import OutboxRow, OutgoingEvent

__all__ = [
    "OTHER_ACTOR",
    "DataRightsStore",
    "DataRightsTransaction",
    "Erased",
    "StoredRequest",
]

# An export names no one else: another person's id as a revision's actor reads as this.
OTHER_ACTOR: Final = "someone else"

_SUCCESSFUL: Final = [status.value for status in MemoryStatus if status.success]

_STORED: Final = text(
    """
    SELECT status, reason, receipt FROM data_requests WHERE request_id = :request_id
    FOR UPDATE
    """
)

_RECORD: Final = text(
    """
    INSERT INTO data_requests
        (request_id, kind, subject_kind, subject_id, requested_by_kind, requested_by_id,
         reason, status, receipt, strict, keep_learning, stated_reason, completed_at)
    VALUES (:request_id, :kind, :subject_kind, :subject_id, :requested_by_kind,
            :requested_by_id, :reason, :status, CAST(:receipt AS jsonb), :strict,
            :keep_learning, :stated_reason, clock_timestamp())
    ON CONFLICT (request_id) DO UPDATE
    SET reason = EXCLUDED.reason, status = EXCLUDED.status, receipt = EXCLUDED.receipt,
        completed_at = EXCLUDED.completed_at
    WHERE data_requests.status = 'running'
    """
)

# The dead letters an erasure removed, by digest, kept before they are acked: a rerun after a
# crash finds them again (unacked, they went back) and counts each once.
_NOTE_REMOVED: Final = text(
    """
    INSERT INTO data_requests
        (request_id, kind, subject_kind, subject_id, requested_by_kind, requested_by_id,
         status, strict, keep_learning, stated_reason, removed_letters)
    VALUES (:request_id, :kind, :subject_kind, :subject_id, :requested_by_kind,
            :requested_by_id, 'running', :strict, :keep_learning, :stated_reason,
            CAST(:digests AS text[]))
    ON CONFLICT (request_id) DO UPDATE
    SET removed_letters = ARRAY(
        SELECT DISTINCT d
        FROM unnest(data_requests.removed_letters || EXCLUDED.removed_letters) AS d
        ORDER BY d
    )
    WHERE data_requests.status = 'running'
    RETURNING cardinality(removed_letters) AS removed
    """
)

_REMOVED_COUNT: Final = text(
    "SELECT cardinality(removed_letters) FROM data_requests WHERE request_id = :request_id"
)

# -- an erasure's statements ------------------------------------------------------------------

_LOCK_USER: Final = text("SELECT user_id FROM users WHERE user_disc_id = :subject_id FOR UPDATE")
_LOCK_SERVER: Final = text(
    "SELECT server_id FROM servers WHERE server_disc_id = :subject_id FOR UPDATE"
)

# Before the lock: what the dead letters may name (an erasure's memories, every lineage).
_USER_MEMORY_IDS: Final = text(
    """
    SELECT m.personal_memory_id AS memory_id
    FROM personal_memories AS m JOIN users AS u ON u.user_id = m.user_id
    WHERE u.user_disc_id = :subject_id
    UNION
    SELECT r.memory_id FROM memory_revisions AS r JOIN users AS u ON u.user_id = r.owner_user_id
    WHERE u.user_disc_id = :subject_id AND r.scope = 'target_user'
    UNION
    SELECT m.server_memory_id FROM server_memories AS m JOIN users AS u ON u.user_id = m.user_id
    WHERE u.user_disc_id = :subject_id AND :strict
    """
)
_SERVER_MEMORY_IDS: Final = text(
    """
    SELECT m.server_memory_id AS memory_id
    FROM server_memories AS m JOIN servers AS s ON s.server_id = m.server_id
    WHERE s.server_disc_id = :subject_id
    UNION
    SELECT r.memory_id FROM memory_revisions AS r JOIN servers AS s ON s.server_id = r.server_id
    WHERE s.server_disc_id = :subject_id AND r.scope = 'server_wide'
    """
)

_DELETE_PERSONAL: Final = text(
    "DELETE FROM personal_memories WHERE user_id = :user_id RETURNING personal_memory_id"
)
_DELETE_TAUGHT: Final = text(
    """
    DELETE FROM server_memories AS m USING servers AS s
    WHERE m.user_id = :user_id AND s.server_id = m.server_id
    RETURNING m.server_memory_id, s.server_disc_id
    """
)
_UNTEACH: Final = text(
    """
    UPDATE server_memories AS m SET user_id = NULL FROM servers AS s
    WHERE m.user_id = :user_id AND s.server_id = m.server_id
    RETURNING m.server_memory_id, s.server_disc_id
    """
)
_DELETE_SERVER_MEMORIES: Final = text(
    "DELETE FROM server_memories WHERE server_id = :server_id RETURNING server_memory_id"
)

# Exactly the change the append-only trigger allows: both contents to null, `redacted_at`
# set, and the actor `erased` where it is the subject.
_REDACT_REVISIONS: Final = text(
    f"""
    UPDATE memory_revisions
    SET content_before = NULL, content_after = NULL, redacted_at = now(),
        actor_disc_id = CASE WHEN actor_disc_id = :actor THEN '{ERASED_ACTOR}'
                             ELSE actor_disc_id END
    WHERE redacted_at IS NULL
      AND (memory_id = ANY(CAST(:memory_ids AS bigint[]))
           OR (scope = 'target_user' AND owner_user_id = :owner_user_id)
           OR (scope = 'server_wide' AND server_id = :server_id))
    RETURNING memory_id
    """
)
_ERASE_ACTOR: Final = text(
    f"""
    UPDATE memory_revisions SET actor_disc_id = '{ERASED_ACTOR}'
    WHERE actor_disc_id = :actor
    """
)

_FORGET_USER_ROW: Final = text(
    """
    UPDATE users
    SET user_nickname = NULL,
        privacy_level = CASE WHEN :keep_learning THEN privacy_level ELSE 2 END
    WHERE user_id = :user_id
    """
)
_DELETE_BLACKLIST_OF_USER: Final = text(
    "DELETE FROM personalization_blacklist WHERE user_id = :user_id"
)
_DELETE_USER_ROW: Final = text("DELETE FROM users WHERE user_id = :user_id")
_DELETE_MEMBERSHIPS_OF_USER: Final = text(
    """
    DELETE FROM guild_members AS g USING servers AS s
    WHERE g.user_disc_id = :subject_id AND s.server_id = g.server_id
    RETURNING s.server_disc_id
    """
)
_DELETE_SERVER_ROWS: Final = (
    text("DELETE FROM server_configs WHERE server_id = :server_id"),
    text("DELETE FROM guild_members WHERE server_id = :server_id"),
    text("DELETE FROM personalization_blacklist WHERE server_id = :server_id"),
)

# The calls an erasure forgets: those the subject triggered (or, for a server, made in it),
# and those that wrote an erased memory.
_ERASED_CALLS: Final = text(
    """
    SELECT tool_call_id FROM tool_call_inbox
    WHERE (:subject_kind = 'user' AND triggerer_id = :subject_id)
       OR (:subject_kind = 'guild' AND guild_id = :subject_id)
    UNION
    SELECT tool_call_id FROM memory_revisions
    WHERE memory_id = ANY(CAST(:memory_ids AS bigint[]))
    """
)
# A redacted record answers a redelivered call with its status and ids alone.
_REDACT_RECORDS: Final = text(
    """
    UPDATE tool_call_inbox
    SET fingerprint = NULL,
        result = CASE WHEN result IS NULL THEN NULL ELSE jsonb_strip_nulls(jsonb_build_object(
            'status', result -> 'status',
            'success', to_jsonb((result ->> 'status') = ANY(CAST(:successful AS text[]))),
            'tool_name', to_jsonb(tool_name),
            'data', jsonb_strip_nulls(jsonb_build_object(
                'memory_id', result -> 'data' -> 'memory_id',
                'scope', result -> 'data' -> 'scope'))
        )) END
    WHERE tool_call_id = ANY(CAST(:tool_call_ids AS text[]))
      AND (fingerprint IS NOT NULL OR result ? 'message')
    """
)
_DELETE_OUTBOX_ROWS: Final = text(
    """
    DELETE FROM outbox
    WHERE correlation_id = ANY(CAST(:tool_call_ids AS text[]))
       OR (event_type LIKE 'memory.%'
           AND (convert_from(body, 'UTF8')::jsonb ->> 'memory_id')::bigint
               = ANY(CAST(:memory_ids AS bigint[])))
    """
)
_NOTICES: Final = text(
    """
    SELECT event_id, shard_id, channel_id, message_id, memory_id FROM posted_notices
    WHERE memory_id = ANY(CAST(:memory_ids AS bigint[]))
       OR (:subject_kind = 'guild' AND guild_id = :subject_id)
    ORDER BY posted_at, event_id
    """
)

# -- an export's ----------------------------------------------------------------------------

_EXPORT_USER: Final = text(
    "SELECT user_id, user_disc_id, user_nickname, privacy_level FROM users "
    "WHERE user_disc_id = :subject_id"
)
_EXPORT_MEMBERSHIPS: Final = text(
    """
    SELECT s.server_disc_id AS guild_id, g.display_name, g.global_name, g.username
    FROM guild_members AS g JOIN servers AS s ON s.server_id = g.server_id
    WHERE g.user_disc_id = :subject_id ORDER BY s.server_disc_id
    """
)
_EXPORT_MEMORIES: Final = text(
    """
    SELECT personal_memory_id AS memory_id, persona_lineage_id, content, tags, created_at,
           updated_at
    FROM personal_memories WHERE user_id = :user_id ORDER BY personal_memory_id
    """
)
_EXPORT_REVISIONS: Final = text(
    """
    SELECT revision_id, memory_id, action, occurred_at, content_before, content_after,
           actor_disc_id
    FROM memory_revisions
    WHERE scope = 'target_user' AND owner_user_id = :user_id
      AND memory_id = ANY(CAST(:memory_ids AS bigint[]))
    ORDER BY revision_id
    """
)
_EXPORT_TAUGHT: Final = text(
    """
    SELECT s.server_disc_id AS guild_id, m.server_memory_id AS memory_id, m.content
    FROM server_memories AS m JOIN servers AS s ON s.server_id = m.server_id
    WHERE m.user_id = :user_id ORDER BY m.server_memory_id
    """
)
_EXPORT_CALLS: Final = text("SELECT count(*) FROM tool_call_inbox WHERE triggerer_id = :subject_id")


@dataclass(frozen=True, slots=True)
class StoredRequest:
    """A request answered before: how, to answer it again."""

    status: str
    reason: RefusalReason | None
    receipt: Receipt | None


@dataclass(slots=True)
class Erased:
    """What an erasure's statements did: counted, and who must hear of it."""

    counts: ErasureCounts = field(default_factory=ErasureCounts)
    notices: list[Notice] = field(default_factory=list)
    invalidated_users: set[str] = field(default_factory=set)
    invalidated_servers: set[str] = field(default_factory=set)


def _request_params(request: DataRequestRequested) -> dict[str, Any]:
    return {
        "request_id": request.request_id,
        "kind": request.kind,
        "subject_kind": request.subject.kind,
        "subject_id": request.subject.id,
        "requested_by_kind": request.requested_by.kind,
        "requested_by_id": request.requested_by.id,
        "strict": request.strict,
        "keep_learning": request.keep_learning,
        "stated_reason": request.stated_reason,
    }


class DataRightsTransaction:
    """One transaction of a data request: its row read and written, the subject erased or
    exported, the events queued."""

    def __init__(self, connection: AsyncConnection) -> None:
        self._connection = connection

    async def stored(self, request_id: str) -> StoredRequest | None:
        """The request's answer, if it was answered (its row locked until the commit);
        None for a new one, or one an earlier run left `running`."""
        row = (await self._connection.execute(_STORED, {"request_id": request_id})).first()
        if row is None or row.status == "running":
            return None
        receipt = None if row.receipt is None else Receipt.model_validate(row.receipt)
        return StoredRequest(row.status, row.reason, receipt)

    async def record(
        self,
        request: DataRequestRequested,
        *,
        reason: RefusalReason | None,
        receipt: Receipt | None,
    ) -> None:
        """The request's row, answered: refused with `reason`, else done."""
        await self._connection.execute(
            _RECORD,
            {
                **_request_params(request),
                "reason": reason,
                "status": "refused" if reason is not None else "done",
                "receipt": None if receipt is None else receipt.model_dump_json(),
            },
        )

    async def removed_letters(self, request_id: str) -> int:
        """How many dead letters the request's runs removed."""
        found = await self._connection.execute(_REMOVED_COUNT, {"request_id": request_id})
        return int(found.scalar_one_or_none() or 0)

    async def queue(self, events: Sequence[OutgoingEvent]) -> list[OutboxRow]:
        return await queue_events(self._connection, events) if events else []

    async def erase(self, request: DataRequestRequested) -> Erased:
        """Every store of the subject, in this transaction, its anchor row locked first."""
        if request.subject.kind == "user":
            return await self._erase_user(request)
        return await self._erase_server(request)

    async def _rows(self, statement: Any, **params: Any) -> list[Any]:
        return list(await self._connection.execute(statement, params))

    async def _erase_user(self, request: DataRequestRequested) -> Erased:
        subject_id = request.subject.id
        erased = Erased(invalidated_users={subject_id})
        locked = await self._rows(_LOCK_USER, subject_id=subject_id)
        user_id = locked[0].user_id if locked else None
        deleted: list[int] = []
        teachers_removed = 0
        if user_id is not None:
            deleted = [row[0] for row in await self._rows(_DELETE_PERSONAL, user_id=user_id)]
            taught = await self._rows(
                _DELETE_TAUGHT if request.strict else _UNTEACH, user_id=user_id
            )
            erased.invalidated_servers.update(row.server_disc_id for row in taught)
            if request.strict:
                deleted += [row.server_memory_id for row in taught]
            else:
                teachers_removed = len(taught)
        redacted = await self._rows(
            _REDACT_REVISIONS,
            actor=subject_id,
            memory_ids=deleted,
            owner_user_id=user_id,
            server_id=None,
        )
        await self._connection.execute(_ERASE_ACTOR, {"actor": subject_id})
        if user_id is not None:
            if request.requested_by.kind == "discord_deleted_user":
                await self._connection.execute(_DELETE_BLACKLIST_OF_USER, {"user_id": user_id})
                await self._connection.execute(_DELETE_USER_ROW, {"user_id": user_id})
            else:
                await self._connection.execute(
                    _FORGET_USER_ROW,
                    {"user_id": user_id, "keep_learning": request.keep_learning},
                )
        memberships = await self._rows(_DELETE_MEMBERSHIPS_OF_USER, subject_id=subject_id)
        erased.invalidated_servers.update(row.server_disc_id for row in memberships)
        memory_ids = sorted({*deleted, *(row.memory_id for row in redacted)})
        records, outbox_rows = await self._forget_calls(request, memory_ids)
        erased.counts = ErasureCounts(
            memories_deleted=len(deleted),
            revisions_redacted=len(redacted),
            teachers_removed=teachers_removed,
            records_redacted=records,
            outbox_rows_deleted=outbox_rows,
        )
        erased.notices = await self._notices(request, memory_ids)
        return erased

    async def _erase_server(self, request: DataRequestRequested) -> Erased:
        subject_id = request.subject.id
        erased = Erased(invalidated_servers={subject_id})
        locked = await self._rows(_LOCK_SERVER, subject_id=subject_id)
        server_id = locked[0].server_id if locked else None
        deleted: list[int] = []
        redacted: list[Any] = []
        if server_id is not None:
            rows = await self._rows(_DELETE_SERVER_MEMORIES, server_id=server_id)
            deleted = [row.server_memory_id for row in rows]
            redacted = await self._rows(
                _REDACT_REVISIONS,
                actor=None,
                memory_ids=deleted,
                owner_user_id=None,
                server_id=server_id,
            )
            for statement in _DELETE_SERVER_ROWS:
                await self._connection.execute(statement, {"server_id": server_id})
        memory_ids = sorted({*deleted, *(row.memory_id for row in redacted)})
        records, outbox_rows = await self._forget_calls(request, memory_ids)
        erased.counts = ErasureCounts(
            memories_deleted=len(deleted),
            revisions_redacted=len(redacted),
            records_redacted=records,
            outbox_rows_deleted=outbox_rows,
        )
        erased.notices = await self._notices(request, memory_ids)
        return erased

    async def _forget_calls(
        self, request: DataRequestRequested, memory_ids: Sequence[int]
    ) -> tuple[int, int]:
        """The calls' records redacted and their outbox rows (and the erased memories') gone:
        how many of each."""
        calls = await self._rows(
            _ERASED_CALLS,
            subject_kind=request.subject.kind,
            subject_id=request.subject.id,
            memory_ids=list(memory_ids),
        )
        tool_call_ids = sorted(row.tool_call_id for row in calls)
        records = await self._connection.execute(
            _REDACT_RECORDS, {"tool_call_ids": tool_call_ids, "successful": _SUCCESSFUL}
        )
        outbox = await self._connection.execute(
            _DELETE_OUTBOX_ROWS, {"tool_call_ids": tool_call_ids, "memory_ids": list(memory_ids)}
        )
        return int(records.rowcount or 0), int(outbox.rowcount or 0)

    async def _notices(
        self, request: DataRequestRequested, memory_ids: Sequence[int]
    ) -> list[Notice]:
        rows = await self._rows(
            _NOTICES,
            memory_ids=list(memory_ids),
            subject_kind=request.subject.kind,
            subject_id=request.subject.id,
        )
        return [
            Notice(
                event_id=str(row.event_id),
                shard_id=row.shard_id,
                channel_id=row.channel_id,
                message_id=row.message_id,
                memory_id=row.memory_id,
            )
            for row in rows
        ]

    async def export(self, request: DataRequestRequested) -> ExportDocument:
        """Everything held about a user, nothing about anyone else (a guild subject: none)."""
        if request.subject.kind != "user":
            return ExportDocument(user=None)
        subject_id = request.subject.id
        users = await self._rows(_EXPORT_USER, subject_id=subject_id)
        memberships = tuple(
            ExportedMembership(
                guild_id=row.guild_id,
                display_name=row.display_name,
                global_name=row.global_name,
                username=row.username,
            )
            for row in await self._rows(_EXPORT_MEMBERSHIPS, subject_id=subject_id)
        )
        calls = await self._connection.execute(_EXPORT_CALLS, {"subject_id": subject_id})
        triggered = int(calls.scalar_one())
        if not users:
            return ExportDocument(
                user=None, guild_members=memberships, tool_calls_triggered=triggered
            )
        user = users[0]
        memories = await self._rows(_EXPORT_MEMORIES, user_id=user.user_id)
        revisions: dict[int, list[ExportedRevision]] = {}
        for row in await self._rows(
            _EXPORT_REVISIONS,
            user_id=user.user_id,
            memory_ids=[memory.memory_id for memory in memories],
        ):
            revisions.setdefault(row.memory_id, []).append(
                ExportedRevision(
                    revision_id=row.revision_id,
                    action=row.action,
                    occurred_at=row.occurred_at.astimezone(UTC),
                    content_before=row.content_before,
                    content_after=row.content_after,
                    actor_disc_id=(
                        row.actor_disc_id if row.actor_disc_id == subject_id else OTHER_ACTOR
                    ),
                )
            )
        taught = await self._rows(_EXPORT_TAUGHT, user_id=user.user_id)
        return ExportDocument(
            user=ExportedUser(
                user_id=user.user_disc_id,
                user_nickname=user.user_nickname,
                privacy_level=user.privacy_level,
            ),
            guild_members=memberships,
            personal_memories=tuple(
                ExportedMemory(
                    memory_id=row.memory_id,
                    persona_lineage_id=row.persona_lineage_id,
                    content=row.content,
                    tags=tuple(row.tags),
                    created_at=row.created_at.astimezone(UTC),
                    updated_at=row.updated_at.astimezone(UTC),
                    revisions=tuple(revisions.get(row.memory_id, ())),
                )
                for row in memories
            ),
            server_memories_taught=tuple(
                TaughtMemory(guild_id=row.guild_id, memory_id=row.memory_id, content=row.content)
                for row in taught
            ),
            tool_calls_triggered=triggered,
        )


class DataRightsStore:
    """Opens a data request's transactions, on the worker's engine."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[DataRightsTransaction]:
        """Commits when the block ends normally, rolls back when it raises."""
        async with self.engine.begin() as connection:
            yield DataRightsTransaction(connection)

    async def erased_memory_ids(self, request: DataRequestRequested) -> set[int]:
        """The memories an erasure of the subject would remove, read before it runs (for the
        dead letters that name them)."""
        statement = _USER_MEMORY_IDS if request.subject.kind == "user" else _SERVER_MEMORY_IDS
        async with self.engine.connect() as connection:
            rows = await connection.execute(
                statement, {"subject_id": request.subject.id, "strict": request.strict}
            )
            return {int(row.memory_id) for row in rows}

    async def note_removed_letters(
        self, request: DataRequestRequested, digests: Sequence[str]
    ) -> int:
        """Keeps the digests of the dead letters just removed (committed before they are
        acked); how many distinct ones the request removed in all its runs."""
        async with self.engine.begin() as connection:
            found = await connection.execute(
                _NOTE_REMOVED, {**_request_params(request), "digests": list(digests)}
            )
            removed = found.scalar_one_or_none()
        return int(removed or 0)
