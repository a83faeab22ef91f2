"""The worker's own SQL for successful server-memory updates, as psycopg statements.

The text is imported from the modules that own it (`worker.adapters.inbox`'s `CLAIM` and
`FINISH`, `worker.adapters.memory_writes`' `APPLY`, already compiled for psycopg there, and
`worker.adapters.outbox`'s `MARK_PUBLISHED`, compiled with the worker's `psycopg_sql`), so the
bench runs exactly the statements the worker runs.
Their parameters come from the worker's own builders (`claim_params`, `apply_params`,
`events_params`, `answers_params`) over the worker's own objects (`ToolCallRequested`,
`PlannedWrite`, `OutgoingEvent`, `ToolCallCompleted`): each batch travels as one JSON
parameter, and a single call is a batch of one. The helpers here only put those builders
together the way the worker's unit of work (`PostgresUnitOfWork`) does.

If the worker renames a statement or a builder, importing this module fails; if a statement
takes other parameters, the builders change with it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from contracts import ToolCallCompleted, ToolCallRequested
from infra.storage.engine import psycopg_sql
from worker.adapters import inbox, memory_writes
from worker.adapters.inbox import answers_params
from worker.adapters.memory_writes import apply_params, write_waves
from worker.adapters.outbox import MARK_PUBLISHED as MARK_PUBLISHED_TEXT
from worker.adapters.outbox import events_params
from worker.core.model import MemoryWrite
from worker.core.outgoing import OutgoingEvent
from worker.core.records import PlannedWrite

__all__ = [
    "APPLY",
    "CLAIM",
    "FINISH",
    "MARK_PUBLISHED",
    "apply_batches",
    "finish_params",
    "server_update",
]


# Claims the inbox rows and loads each call's server, persona and config in one statement.
CLAIM: Final = inbox.CLAIM
# The scoped writes and their revision rows, returning what the events need.
APPLY: Final = memory_writes.APPLY
# Queues the outbox rows and stores the results: the last statement before commit.
FINISH: Final = inbox.FINISH
# After the broker confirmed the events, in the next transaction (`event_ids`: UUIDs).
MARK_PUBLISHED: Final = psycopg_sql(MARK_PUBLISHED_TEXT)


def server_update(
    call: ToolCallRequested, claimed: Mapping[str, Any], *, memory_id: int, content: str
) -> PlannedWrite:
    """The write the worker plans (`plan_update`, no owner) for a server-memory update.

    `claimed` is the call's row of `CLAIM`, with its server and persona lineage.
    """
    return PlannedWrite(
        MemoryWrite(
            scope="server_wide",
            memory_id=memory_id,
            content=content,
            server_id=claimed["server_id"],
            persona_lineage_id=claimed["persona_lineage_id"],
        ),
        actor=call.context.triggerer_id,
        tool_call_id=call.tool_call_id,
    )


def apply_batches(writes: Sequence[PlannedWrite]) -> list[dict[str, str]]:
    """`APPLY`'s parameters, one statement per wave, as `PostgresMemoryWrites.apply` runs them.

    A batch whose memory ids are distinct is one statement.
    """
    return [apply_params(writes, wave) for wave in write_waves(writes)]


def finish_params(
    results: Sequence[ToolCallCompleted], events: Sequence[OutgoingEvent], bodies: Sequence[bytes]
) -> dict[str, str]:
    """`FINISH`'s parameters, as `PostgresInbox.finish` passes them."""
    return {**events_params(events, bodies), **answers_params(results)}
