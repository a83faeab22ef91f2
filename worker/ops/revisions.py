"""`ltm audit history` and `ltm memory restore`: a memory's revisions, and undoing one."""

from __future__ import annotations

import sys
import uuid
from typing import TextIO

import aio_pika

from contracts import (
    CacheInvalidate,
    MemoryRestored,
    Topology,
    audit_routing_key,
    cache_routing_key,
)
from infra.logs import get_logger
from infra.settings import Settings
from worker.adapters.broker import EventPublisher
from worker.adapters.database import create_engine
from worker.adapters.outbox import OutboxStore, OutgoingEvent, queue_events
from worker.adapters.revisions import RestoredMemory, Revision, RevisionStore, UnchangedMemory

__all__ = ["print_history", "restore", "restore_events"]

log = get_logger("ltm.ops")


def _one_line(text: str | None, width: int = 60) -> str:
    if text is None:
        return "(deleted)"
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _format(revision: Revision) -> str:
    when = revision.occurred_at.isoformat(timespec="seconds")
    return (
        f"#{revision.revision_id}  {when}  {revision.action:<8}  {revision.scope:<11}"
        f"  by {revision.actor_disc_id}  ({revision.tool_call_id})\n"
        f"    before: {revision.content_before!r}\n"
        f"    after:  {revision.content_after!r}"
    )


async def print_history(settings: Settings, memory_id: int, *, out: TextIO = sys.stdout) -> int:
    engine = create_engine(settings.sqlalchemy_url, pool_size=1)
    try:
        revisions = await RevisionStore(engine).history(memory_id)
    finally:
        await engine.dispose()
    if not revisions:
        print(f"memory {memory_id} has no revisions", file=out)
        return 1
    print(f"memory {memory_id}: {len(revisions)} revision(s), oldest first", file=out)
    for revision in revisions:
        print(_format(revision), file=out)
    return 0


def restore_events(restored: RestoredMemory) -> list[OutgoingEvent]:
    """The audit event and the cache invalidation of a restore; a restore posts no embed."""
    revision = restored.revision
    owner = restored.owner_disc_id
    audit = MemoryRestored(
        tool_call_id=revision.tool_call_id,
        revision_id=revision.revision_id,
        scope="server_wide" if revision.scope == "server_wide" else "target_user",
        memory_id=revision.memory_id,
        # The server key: a guild's id, or the user's id for a DM.
        guild_id=restored.server_disc_id,
        channel_id=None,
        owner_id=owner,
        actor_id=revision.actor_disc_id,
        persona_id=None,
        persona_lineage_id=revision.persona_lineage_id,
        content_before=revision.content_before,
        content_after=revision.content_after,
    )
    events = [OutgoingEvent(audit, audit_routing_key("restored", audit.scope))]
    key = owner if revision.scope == "target_user" else restored.server_disc_id
    if key is not None:
        invalidation = CacheInvalidate(
            cache="user" if revision.scope == "target_user" else "persona_state",
            key=key,
            tool_call_id=revision.tool_call_id,
        )
        events.append(
            OutgoingEvent(invalidation, cache_routing_key(invalidation.cache, invalidation.key))
        )
    return events


async def restore(
    settings: Settings, revision_id: int, *, actor: str = "cli", out: TextIO = sys.stdout
) -> int:
    """Commits the content, its revision and its events together, then publishes the events.

    If publishing fails after the commit, a running worker's outbox sweep publishes them.
    """
    engine = create_engine(settings.sqlalchemy_url, pool_size=1)
    tool_call_id = f"restore:{revision_id}:{uuid.uuid4()}"
    try:
        async with RevisionStore(engine).restoring(
            revision_id, actor=actor, tool_call_id=tool_call_id
        ) as (restored, connection):
            if restored is None:
                print(f"no revision {revision_id}", file=out)
                return 1
            if isinstance(restored, UnchangedMemory):
                state = (
                    "does not exist"
                    if restored.content is None
                    else f"holds {_one_line(restored.content)}"
                )
                print(
                    f"memory {restored.memory_id} already is as it was before revision "
                    f"{revision_id} (it {state}): nothing to restore",
                    file=out,
                )
                return 0
            rows = await queue_events(connection, restore_events(restored))
        connection_amqp = await aio_pika.connect(settings.amqp_url)
        async with connection_amqp:
            publisher = await EventPublisher.open(connection_amqp, Topology(settings.amqp_prefix))
            await publisher.publish_rows(rows)
        await OutboxStore(engine).mark_published([row.event_id for row in rows])
    finally:
        await engine.dispose()
    revision = restored.revision
    log.info("memory restored", memory_id=revision.memory_id, tool_call_id=tool_call_id)
    if revision.content_after is None:
        print(
            f"memory {revision.memory_id} removed, as it did not exist before revision "
            f"{revision_id}: revision {revision.revision_id}",
            file=out,
        )
    else:
        print(
            f"memory {revision.memory_id} restored from revision {revision_id} "
            f"as revision {revision.revision_id}: {_one_line(revision.content_after)}",
            file=out,
        )
    return 0
