"""A memory's revisions, and undoing one: the use cases behind `ltm audit history`,
`ltm memory restore` and the console's memory pages."""

from __future__ import annotations

import uuid

from sqlalchemy.ext.asyncio import AsyncEngine

from contracts import MemoryRestored
from infra.observability.logs import get_logger
from infra.settings import Settings
from operators.engines import one_shot_engine
from operators.recording import publish_queued
from operators.revision_store import RestoredMemory, Revision, RevisionStore, UnchangedMemory
from worker.adapters.outbox import queue_events
from worker.core.outgoing import OutgoingEvent, change_events

__all__ = ["restore_events", "restore_revision", "revision_history"]

log = get_logger("ltm.ops")


async def revision_history(engine: AsyncEngine, memory_id: int) -> list[Revision]:
    """The memory's revisions, oldest first; empty when there is no such memory, or it was
    never changed."""
    return await RevisionStore(engine).history(memory_id)


def restore_events(restored: RestoredMemory) -> list[OutgoingEvent]:
    """The audit event and the cache invalidation of a restore; a restore posts no embed."""
    revision = restored.revision
    audit = MemoryRestored(
        tool_call_id=revision.tool_call_id,
        revision_id=revision.revision_id,
        scope="server_wide" if revision.scope == "server_wide" else "target_user",
        memory_id=revision.memory_id,
        # The server key: a guild's id, or the user's id for a DM.
        guild_id=restored.server_disc_id,
        channel_id=None,
        owner_id=restored.owner_disc_id,
        actor_id=revision.actor_disc_id,
        persona_id=None,
        persona_lineage_id=revision.persona_lineage_id,
    )
    return change_events(audit, server_disc_id=restored.server_disc_id)


async def restore_revision(
    settings: Settings, revision_id: int, *, actor: str
) -> RestoredMemory | UnchangedMemory | None:
    """Puts the memory back as it was before `revision_id`, as `actor`: commits the content,
    its revision and its events together, then publishes the events (if publishing fails
    after the commit, a running worker's outbox sweep publishes them).

    None when there is no such revision; `UnchangedMemory` when the memory is already so.
    """
    tool_call_id = f"restore:{revision_id}:{uuid.uuid4()}"
    async with one_shot_engine(settings) as engine:
        async with RevisionStore(engine).restoring(
            revision_id, actor=actor, tool_call_id=tool_call_id
        ) as (restored, connection):
            if restored is None or isinstance(restored, UnchangedMemory):
                return restored
            rows = await queue_events(connection, restore_events(restored))
        await publish_queued(settings, engine, rows)
    log.info(
        "ltm.memory_restored",
        memory_id=restored.revision.memory_id,
        tool_call_id=tool_call_id,
        actor=actor,
    )
    return restored
