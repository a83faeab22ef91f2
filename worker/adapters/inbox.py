"""`tool_call_inbox`: a batch's calls claimed, each answered once, and the answer repeated
to a call whose id has a record (the idempotency of tool calls). `PostgresInbox` implements
`worker.ports.Inbox`.

The batch's last statement (`FINISH`) stores the answers and queues the events in the outbox
together, so that it goes with COMMIT in one round trip.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import orjson
import psycopg

from contracts import (
    MemoryStatus,
    ResultData,
    ToolCallCompleted,
    ToolCallRequested,
    encode_event,
    rfc3339_utc,
)
from infra.storage.engine import fetch_all, psycopg_sql
from worker.adapters.outbox import OUTBOX_INSERT, events_params
from worker.core.idempotency import call_fingerprint
from worker.core.model import ServerState
from worker.core.outgoing import OutboxRow, OutgoingEvent, Traceparents, outbox_rows
from worker.core.records import Claim, StoredResult

# What a call answered from a record an erasure redacted says instead of its message.
REDACTED_MESSAGE: Final = "This result is no longer available: its details were erased."

__all__ = [
    "CLAIM",
    "FINISH",
    "REDACTED_MESSAGE",
    "PostgresInbox",
    "answers_params",
    "claim_params",
    "stored_results",
]

# The planner counts a JSON batch as 100 rows, and for that many it reads a table of up to
# tens of thousands of rows whole: each join on a table that grows with use also matches its
# keys against an array made from the batch, which it takes for a few, so that it uses the
# index at every size.
# Inbox rows first, in tool_call_id order, so that two workers' batches sharing calls take the
# row locks in the same order; a copy of a call running elsewhere makes this wait, then skip
# (and `_STORED_RESULTS`, a statement of its own, then reads what that one committed).
CLAIM: Final = psycopg_sql(
    """
    WITH input AS (
        SELECT * FROM json_to_recordset(CAST(:calls AS json)) AS i(
            tool_call_id text, event_id uuid, tool_name text, guild_id text, channel_id text,
            shard_id integer, server_disc_id text, persona_id integer, fingerprint text,
            requested_at timestamptz, triggerer_id text
        )
    ), claimed AS (
        INSERT INTO tool_call_inbox
            (tool_call_id, event_id, tool_name, guild_id, channel_id, shard_id, fingerprint,
             requested_at, triggerer_id)
        SELECT tool_call_id, event_id, tool_name, guild_id, channel_id, shard_id, fingerprint,
               requested_at, triggerer_id
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
    LEFT JOIN servers AS s
      ON s.server_disc_id = i.server_disc_id
     AND s.server_disc_id = ANY(ARRAY(SELECT server_disc_id FROM input))
    LEFT JOIN personas AS p
      ON p.persona_id = i.persona_id AND p.persona_id = ANY(ARRAY(SELECT persona_id FROM input))
    LEFT JOIN server_configs AS sc ON sc.server_id = s.server_id
    """
)

_STORED_RESULTS: Final = psycopg_sql(
    """
    SELECT tool_call_id, result, tool_name, guild_id, channel_id, shard_id, fingerprint
    FROM tool_call_inbox WHERE tool_call_id = ANY(:tool_call_ids)
    """
)

# Every result and event of a batch: the last statement, sent with COMMIT. It returns
# nothing, so that the two travel in one round trip. `completed_at` is the clock's time, not
# the transaction's start: with the request's time it is what the user waited.
FINISH: Final = psycopg_sql(
    f"""
    WITH answers AS (
        SELECT * FROM json_to_recordset(CAST(:answers AS json)) AS a(
            tool_call_id text, status text, result jsonb
        )
    ), answered AS (
        UPDATE tool_call_inbox AS inbox
        SET status = a.status, result = a.result, completed_at = clock_timestamp()
        FROM answers AS a
        WHERE inbox.tool_call_id = a.tool_call_id
          AND inbox.tool_call_id = ANY(ARRAY(SELECT tool_call_id FROM answers))
    )
    {OUTBOX_INSERT}
    """
)


class PostgresInbox:
    """The inbox on a batch's cursor; `traceparents`: the trace context of each call (by
    tool_call_id), kept with its events."""

    __slots__ = ("_cursor", "_traceparents")

    def __init__(self, cursor: psycopg.AsyncCursor[Any], traceparents: Traceparents) -> None:
        self._cursor = cursor
        self._traceparents = traceparents

    async def claim(self, calls: Sequence[ToolCallRequested]) -> list[Claim]:
        """Writes the inbox rows first, with each call's fingerprint; calls whose id has a
        record come back with it (the record's result and the fingerprint of its call).

        The tool_call_ids of `calls` are distinct.
        """
        cursor = self._cursor
        rows = await fetch_all(cursor, CLAIM, claim_params(calls))
        by_id = {row.tool_call_id: row for row in rows}
        answered_before = [
            call.tool_call_id for call in calls if not by_id[call.tool_call_id].claimed
        ]
        stored = await stored_results(cursor, answered_before) if answered_before else {}
        claims = []
        for call in calls:
            row = by_id[call.tool_call_id]
            if not row.claimed:
                claims.append(Claim(stored=stored[call.tool_call_id], state=None))
                continue
            claims.append(Claim(stored=None, state=_server_state(row)))
        return claims

    async def finish(
        self, results: Sequence[ToolCallCompleted], events: Sequence[OutgoingEvent]
    ) -> list[OutboxRow]:
        """Stores the results for idempotency and queues the events, in this transaction.

        Sent, not awaited: the statement goes with COMMIT, and its errors are the commit's.
        """
        bodies = [encode_event(outgoing.event) for outgoing in events]
        traceparents = self._traceparents
        await self._cursor.execute(
            FINISH, {**events_params(events, bodies, traceparents), **answers_params(results)}
        )
        return outbox_rows(events, bodies, traceparents)


def _server_state(row: Any) -> ServerState | None:
    """The server, persona and config the claim read; None where either is unknown."""
    if row.server_id is None or row.persona_id is None:
        return None
    return ServerState(
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


async def stored_results(
    cursor: psycopg.AsyncCursor[Any], tool_call_ids: Sequence[str]
) -> dict[str, StoredResult]:
    rows = await fetch_all(cursor, _STORED_RESULTS, {"tool_call_ids": list(tool_call_ids)})
    found: dict[str, StoredResult] = {}
    for row in rows:
        if row.result is None:
            # Unreachable by design: the row and its result commit together.
            raise LookupError(f"tool call {row.tool_call_id} has no stored result")
        result = row.result
        found[row.tool_call_id] = StoredResult(
            status=MemoryStatus(result["status"]),
            # An erasure keeps the status and ids of a result, not its message.
            message=result.get("message") or REDACTED_MESSAGE,
            data=ResultData.model_validate_json(orjson.dumps(result.get("data") or {})),
            tool_name=row.tool_name,
            guild_id=row.guild_id,
            channel_id=row.channel_id,
            shard_id=row.shard_id,
            fingerprint=row.fingerprint,
        )
    return found


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
                    "triggerer_id": call.context.triggerer_id,
                }
                for call in calls
            ]
        ).decode()
    }


def answers_params(results: Sequence[ToolCallCompleted]) -> dict[str, str]:
    return {"answers": orjson.dumps([_stored_answer(result) for result in results]).decode()}


def _stored_answer(result: ToolCallCompleted) -> dict[str, Any]:
    stored = {
        "status": result.status.value,
        "message": result.message,
        "data": result.data.model_dump(mode="json"),
    }
    return {
        "tool_call_id": result.tool_call_id,
        "status": result.status.value,
        "result": _without_nul(stored),
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
