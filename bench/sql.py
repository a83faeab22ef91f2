"""The worker's own SQL for successful server-memory updates, as psycopg statements.

The text is imported from `worker.adapters.database` (`_CLAIM`, `_APPLY`, `_FINISH`,
`_MARK_PUBLISHED`) and compiled once with SQLAlchemy's psycopg dialect (`:name` →
`%(name)s`), so the bench runs exactly the statements the worker runs. Those statements take
arrays, one element per call of a batch; a single call is a batch of one.

If the worker's SQL changes shape this module fails loudly at import: a renamed statement
raises ImportError, and a statement whose parameters are not the ones filled in here raises
RuntimeError naming both sets. Then the bench needs updating along with the worker.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import TextClause
from sqlalchemy.dialects.postgresql import psycopg as psycopg_dialect

from worker.adapters.database import _APPLY, _CLAIM, _FINISH, _MARK_PUBLISHED

__all__ = [
    "CLAIM",
    "FINISH",
    "MARK_PUBLISHED",
    "WRITE",
    "CallValues",
    "OutboxValues",
    "claim_params",
    "finish_params",
    "write_params",
]


def _compiled(name: str, statement: TextClause, expected: set[str]) -> str:
    dialect = psycopg_dialect.dialect()  # type: ignore[no-untyped-call]
    compiled = statement.compile(dialect=dialect)
    if set(compiled.params) != expected:
        raise RuntimeError(
            f"worker.adapters.database.{name} takes {sorted(compiled.params)}; "
            f"bench/sql.py fills in {sorted(expected)}: update the bench"
        )
    return str(compiled)


_CALL_COLUMNS: Final = {"tool_call_ids", "event_ids", "tool_names", "guild_ids", "channel_ids"}
_OUTBOX_COLUMNS: Final = {
    "event_ids",
    "event_types",
    "routing_keys",
    "correlation_ids",
    "bodies",
    "ttls",
}

# Claims the inbox rows and loads each call's server, persona and config in one statement.
CLAIM: Final = _compiled(
    "_CLAIM", _CLAIM, _CALL_COLUMNS | {"shard_ids", "server_disc_ids", "persona_ids"}
)
# The scoped writes and their revision rows, returning what the events need.
WRITE: Final = _compiled(
    "_APPLY",
    _APPLY,
    {
        "ords",
        "scopes",
        "memory_ids",
        "server_ids",
        "lineages",
        "owner_user_ids",
        "contents",
        "actors",
        "tool_call_ids",
    },
)
# Queues the outbox rows and stores the results: the last statement before commit.
FINISH: Final = _compiled(
    "_FINISH", _FINISH, _OUTBOX_COLUMNS | {"answered_ids", "statuses", "results"}
)
# After the broker confirmed the events, in a transaction of its own.
MARK_PUBLISHED: Final = _compiled("_MARK_PUBLISHED", _MARK_PUBLISHED, {"outbox_ids"})


@dataclass(frozen=True, slots=True)
class CallValues:
    """What one server-memory update call puts into the statements."""

    tool_call_id: str
    event_id: uuid.UUID
    tool_name: str
    guild_id: str | None
    channel_id: str
    shard_id: int
    server_disc_id: str
    persona_id: int
    memory_id: int
    content: str
    actor: str


@dataclass(frozen=True, slots=True)
class OutboxValues:
    """The events of one call, as the outbox stores them, and the result the inbox keeps."""

    event_ids: Sequence[uuid.UUID]
    event_types: Sequence[str]
    routing_keys: Sequence[str]
    bodies: Sequence[bytes]
    ttls: Sequence[int | None]
    correlated: Sequence[bool]  # whether each event carries the call's id as correlation id
    status: str
    result: str  # JSON: status, message, data


def claim_params(calls: Sequence[CallValues]) -> dict[str, Any]:
    return {
        "tool_call_ids": [call.tool_call_id for call in calls],
        "event_ids": [call.event_id for call in calls],
        "tool_names": [call.tool_name for call in calls],
        "guild_ids": [call.guild_id for call in calls],
        "channel_ids": [call.channel_id for call in calls],
        "shard_ids": [call.shard_id for call in calls],
        "server_disc_ids": [call.server_disc_id for call in calls],
        "persona_ids": [call.persona_id for call in calls],
    }


def write_params(
    calls: Sequence[CallValues], *, server_ids: Sequence[int], lineages: Sequence[int]
) -> dict[str, Any]:
    """Server-memory updates, with the servers and lineages the claim loaded.

    The memory ids of one statement must be distinct (the worker splits a batch so).
    """
    return {
        "ords": list(range(len(calls))),
        "scopes": ["server_wide"] * len(calls),
        "memory_ids": [call.memory_id for call in calls],
        "server_ids": list(server_ids),
        "lineages": list(lineages),
        "owner_user_ids": [None] * len(calls),
        "contents": [call.content for call in calls],
        "actors": [call.actor for call in calls],
        "tool_call_ids": [call.tool_call_id for call in calls],
    }


def finish_params(answered: Sequence[tuple[str, OutboxValues]]) -> dict[str, Any]:
    """`FINISH` for (tool_call_id, its events) pairs, shaped as the worker's `_queue` does."""
    return {
        "event_ids": [i for _, outbox in answered for i in outbox.event_ids],
        "event_types": [t for _, outbox in answered for t in outbox.event_types],
        "routing_keys": [k for _, outbox in answered for k in outbox.routing_keys],
        "correlation_ids": [
            tool_call_id if flag else None
            for tool_call_id, outbox in answered
            for flag in outbox.correlated
        ],
        "bodies": [b for _, outbox in answered for b in outbox.bodies],
        "ttls": [t for _, outbox in answered for t in outbox.ttls],
        "answered_ids": [tool_call_id for tool_call_id, _ in answered],
        "statuses": [outbox.status for _, outbox in answered],
        "results": [outbox.result for _, outbox in answered],
    }
