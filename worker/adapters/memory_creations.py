"""The create tool's writes: a batch's scopes locked and read with ids for its new
memories, then the memories inserted with their `created` revisions.
`PostgresScopeCreations` implements `worker.ports.ScopeCreations`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import orjson
import psycopg

from infra.storage.engine import named_cursor, psycopg_sql
from infra.storage.revisions import REVISION_INSERT_WITH_ID
from worker.core.create import ExistingMemory, ScopeKey
from worker.core.records import LockedOwner, LockedScopes, PlannedCreation

__all__ = ["PostgresScopeCreations", "creations_params", "scopes_params"]

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

# The batch's new memories and their `created` revisions (content_before ''), each row with
# its revision's id; the teacher of a server memory is the triggerer's users row, when there
# is one.
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
            (server_memory_id, server_id, persona_id, persona_lineage_id, user_id, content,
             revision_id)
        SELECT i.memory_id, i.server_id, i.persona_id, i.lineage, teacher.user_id, i.content,
               i.revision_id
        FROM input AS i LEFT JOIN users AS teacher ON teacher.user_disc_id = i.actor
        WHERE i.scope = 'server_wide'
    ), personal_created AS (
        INSERT INTO personal_memories
            (personal_memory_id, user_id, persona_lineage_id, content, revision_id)
        SELECT memory_id, owner_user_id, lineage, content, revision_id FROM input
        WHERE scope = 'target_user'
    )
    {REVISION_INSERT_WITH_ID}
    SELECT revision_id, scope, memory_id, 'created', '', content, server_id,
           CASE WHEN scope = 'target_user' THEN owner_user_id END, lineage, actor,
           tool_call_id, now()
    FROM input
    """
)


class PostgresScopeCreations:
    """The create tool's writes, on a batch's connection (each read a cursor of its own, all
    four in one round trip)."""

    __slots__ = ("_connection",)

    def __init__(self, connection: psycopg.AsyncConnection[Any]) -> None:
        self._connection = connection

    async def lock(self, scopes: Sequence[ScopeKey], *, new_ids: int) -> LockedScopes:
        """Locks the scopes' anchors, then reads the scopes, their owners and `new_ids` pairs
        of ids: four statements in one round trip (pipelined), each read after the locks."""
        connection = self._connection
        server_ids = sorted({key.server_id for key in scopes if key.server_id is not None})
        owner_ids = sorted({key.owner_disc_id for key in scopes if key.owner_disc_id is not None})
        if server_ids:
            await named_cursor(connection).execute(_LOCK_SERVERS, {"server_ids": server_ids})
        owners_read = named_cursor(connection)
        if owner_ids:
            await owners_read.execute(_LOCK_OWNERS, {"owner_disc_ids": owner_ids})
        contents_read = named_cursor(connection)
        await contents_read.execute(_SCOPE_CONTENTS, scopes_params(scopes))
        ids_read = named_cursor(connection)
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

    async def add(self, creations: Sequence[PlannedCreation]) -> None:
        """Inserts the new memories with their revisions. Sent, not awaited: it goes with
        COMMIT, and its errors are the commit's."""
        if creations:
            await named_cursor(self._connection).execute(_CREATE, creations_params(creations))


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
