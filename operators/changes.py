"""`ltm memory changes` and `ltm memory revert` (and the console's Changes page): the
revisions matching a filter, and putting back every memory they touched, in one transaction.

Each memory goes back through the single restore (`restore_on`), so a revert's revisions,
invalidations and `memory.restored` events are a restore's; the revert adds its reason to
each revision and one `operator.memories_reverted` record of the whole.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncConnection

from contracts import (
    MEMORIES_REVERTED_ROUTING_KEY,
    CacheInvalidate,
    MemoriesReverted,
    RevisionFilter,
)
from infra.observability.logs import get_logger
from infra.settings import Settings
from operators.change_store import Change, ChangeStore, current_contents, touched_history
from operators.engines import one_shot_engine
from operators.recording import publish_queued
from operators.revert_plan import RevertPlan, plan_revert
from operators.revision_store import RestoredMemory, restore_on
from operators.revisions import restore_events
from worker.adapters.outbox import queue_events
from worker.core.outgoing import OutboxRow, OutgoingEvent

__all__ = [
    "PlanChanged",
    "RevertDone",
    "list_changes",
    "planned_revert",
    "revert",
    "revert_events",
]

log = get_logger("ltm.ops")


class PlanChanged(RuntimeError):
    """The memories changed between the plan a person approved and the revert: nothing was
    written; the new plan is to be shown again."""

    def __init__(self, plan: RevertPlan) -> None:
        super().__init__("the memories changed since the plan was shown: nothing was reverted")
        self.plan = plan


@dataclass(frozen=True, slots=True)
class RevertDone:
    plan: RevertPlan
    # The new `restored` revisions, one per step of the plan, in its order.
    restored: tuple[RestoredMemory, ...]
    # Shared by the revert's revisions and events (`revert:<uuid>`); None when nothing was
    # reverted, and so nothing written.
    tool_call_id: str | None


async def list_changes(
    settings: Settings, revisions: RevisionFilter, *, limit: int
) -> list[Change]:
    """The revisions matching `revisions`, newest first, at most `limit`."""
    async with one_shot_engine(settings) as engine:
        return await ChangeStore(engine).changes(revisions, limit)


async def _plan(connection: AsyncConnection, revisions: RevisionFilter, force: bool) -> RevertPlan:
    """Read in the revert's own transaction, the touched memories locked: the plan is what
    the transaction then carries out. Raises `TooManyMemories`."""
    history = await touched_history(connection, revisions)
    memory_ids = sorted({entry.revision.memory_id for entry in history})
    current = await current_contents(connection, memory_ids)
    return plan_revert(history, current, force=force)


async def planned_revert(
    settings: Settings, revisions: RevisionFilter, *, force: bool = False
) -> RevertPlan:
    """A dry run: the plan a revert would carry out now, with nothing written."""
    async with (
        one_shot_engine(settings) as engine,
        engine.connect() as connection,
        connection.begin() as transaction,
    ):
        plan = await _plan(connection, revisions, force)
        await transaction.rollback()
    return plan


def revert_events(
    restored: Sequence[RestoredMemory], record: MemoriesReverted
) -> list[OutgoingEvent]:
    """Each restore's events, a cache entry dropped once however many of its memories came
    back, then the revert's record."""
    events: list[OutgoingEvent] = []
    dropped: set[tuple[str, str]] = set()
    for memory in restored:
        for outgoing in restore_events(memory):
            event = outgoing.event
            if isinstance(event, CacheInvalidate):
                if (event.cache, event.key) in dropped:
                    continue
                dropped.add((event.cache, event.key))
            events.append(outgoing)
    return [*events, OutgoingEvent(record, MEMORIES_REVERTED_ROUTING_KEY)]


async def revert(
    settings: Settings,
    revisions: RevisionFilter,
    *,
    reason: str,
    actor: str,
    force: bool = False,
    approved: str | None = None,
) -> RevertDone:
    """Puts back every memory the matching revisions touched, as `actor`, in one transaction:
    the revisions (each with `reason`), their events and the revert's record commit together,
    then the events are published (if publishing fails after the commit, a running worker's
    outbox sweep publishes them).

    `approved`: the fingerprint of the plan a person said yes to; raises `PlanChanged`,
    having written nothing, when the plan is another now. Raises `TooManyMemories`.
    """
    if revisions == RevisionFilter():
        raise ValueError("a revert needs at least one filter")
    tool_call_id = f"revert:{uuid.uuid4()}"
    rows: list[OutboxRow] = []
    async with one_shot_engine(settings) as engine:
        async with engine.begin() as connection:
            plan = await _plan(connection, revisions, force)
            if approved is not None and plan.fingerprint != approved:
                raise PlanChanged(plan)
            restored: list[RestoredMemory] = []
            for step in plan.reverts:
                done = await restore_on(
                    connection, step.undone, actor=actor, tool_call_id=tool_call_id, reason=reason
                )
                # The row is locked since the plan found it differs: the restore writes.
                assert isinstance(done, RestoredMemory)
                restored.append(done)
            if restored:
                record = MemoriesReverted(
                    tool_call_id=tool_call_id,
                    operator=actor,
                    reason=reason,
                    filter=revisions,
                    reverted=len(restored),
                    skipped=len(plan.skipped),
                )
                rows = await queue_events(connection, revert_events(restored, record))
        if rows:
            await publish_queued(settings, engine, rows)
    if restored:
        log.info(
            "ltm.memories_reverted",
            tool_call_id=tool_call_id,
            actor=actor,
            reverted=len(restored),
            skipped=len(plan.skipped),
        )
    else:
        # Nothing written: no revision or event carries the revert's id.
        log.info("ltm.revert_changed_nothing", actor=actor, skipped=len(plan.skipped))
    return RevertDone(plan, tuple(restored), tool_call_id if restored else None)
