"""`ltm audit history` and `ltm memory restore`: a memory's revisions, and undoing one."""

from __future__ import annotations

import dataclasses
import sys
import uuid
from collections.abc import Sequence
from typing import Final, TextIO

from contracts import (
    CacheInvalidate,
    MemoryRestored,
    audit_routing_key,
    cache_routing_key,
)
from infra.logs import get_logger
from infra.settings import Settings
from worker.adapters.database import create_engine
from worker.adapters.outbox import queue_events
from worker.adapters.revisions import RestoredMemory, Revision, RevisionStore, UnchangedMemory
from worker.core.outgoing import OutgoingEvent
from worker.ops.output import (
    ExitCode,
    json_document,
    print_fields,
    print_table,
    shown_content,
    shown_text,
    shown_time,
)
from worker.ops.recording import publish_queued

__all__ = [
    "HISTORY_HEADER",
    "history_rows",
    "print_history",
    "restore",
    "restore_events",
    "restore_revision",
]

log = get_logger("ltm.ops")

HISTORY_HEADER: Final = (
    "REVISION",
    "TIME",
    "ACTION",
    "SCOPE",
    "ACTOR",
    "TOOL CALL",
    "BEFORE",
    "AFTER",
)


def history_rows(revisions: Sequence[Revision]) -> list[tuple[str, ...]]:
    """The rows of `ltm audit history`, one per revision, under `HISTORY_HEADER`."""
    return [
        (
            str(revision.revision_id),
            shown_time(revision.occurred_at),
            revision.action,
            revision.scope,
            shown_text(revision.actor_disc_id),
            shown_text(revision.tool_call_id),
            shown_content(revision.content_before),
            shown_content(revision.content_after),
        )
        for revision in revisions
    ]


async def print_history(
    settings: Settings,
    memory_id: int,
    *,
    as_json: bool = False,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """`ltm audit history MEMORY_ID`: a table of the revisions, or a JSON array of them.
    Exit code 0; 3 when the memory has none."""
    out, err = out or sys.stdout, err or sys.stderr
    engine = create_engine(settings.sqlalchemy_url, pool_size=1)
    try:
        revisions = await RevisionStore(engine).history(memory_id)
    finally:
        await engine.dispose()
    if as_json:
        print(json_document([dataclasses.asdict(revision) for revision in revisions]), file=out)
    elif revisions:
        print_table(HISTORY_HEADER, history_rows(revisions), out)
    if not revisions:
        print(
            f"memory {memory_id} has no revisions: "
            "there is no such memory, or it was never changed",
            file=err,
        )
        return ExitCode.NOT_FOUND
    return ExitCode.OK


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
    settings: Settings,
    revision_id: int,
    *,
    actor: str = "cli",
    as_json: bool = False,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """`ltm memory restore REVISION`: `restore_revision`, printed.

    Exit code 0 (also when there was nothing to change); 3 when there is no such revision.
    """
    out, err = out or sys.stdout, err or sys.stderr
    restored = await restore_revision(settings, revision_id, actor=actor)
    if restored is None:
        print(f"ltm memory restore: no revision {revision_id}", file=err)
        return ExitCode.NOT_FOUND
    if isinstance(restored, UnchangedMemory):
        _print_unchanged(restored, revision_id, as_json=as_json, out=out)
        return ExitCode.OK
    revision = restored.revision
    if as_json:
        restored_fields = {
            "memory_id": revision.memory_id,
            "scope": revision.scope,
            "restored_before_revision": revision_id,
            "revision_id": revision.revision_id,
            "tool_call_id": revision.tool_call_id,
            "content": revision.content_after,
            "changed": True,
        }
        print(json_document(restored_fields), file=out)
    else:
        print_fields(
            [
                ("memory", f"{revision.memory_id} ({revision.scope})"),
                ("restored as before revision", str(revision_id)),
                ("new revision", str(revision.revision_id)),
                ("content", shown_content(revision.content_after, width=None)),
            ],
            out,
        )
    return ExitCode.OK


async def restore_revision(
    settings: Settings, revision_id: int, *, actor: str
) -> RestoredMemory | UnchangedMemory | None:
    """Puts the memory back as it was before `revision_id`, as `actor`: commits the content,
    its revision and its events together, then publishes the events (if publishing fails
    after the commit, a running worker's outbox sweep publishes them).

    None when there is no such revision; `UnchangedMemory` when the memory is already so.
    """
    engine = create_engine(settings.sqlalchemy_url, pool_size=1)
    tool_call_id = f"restore:{revision_id}:{uuid.uuid4()}"
    try:
        async with RevisionStore(engine).restoring(
            revision_id, actor=actor, tool_call_id=tool_call_id
        ) as (restored, connection):
            if restored is None or isinstance(restored, UnchangedMemory):
                return restored
            rows = await queue_events(connection, restore_events(restored))
        await publish_queued(settings, engine, rows)
    finally:
        await engine.dispose()
    log.info(
        "ltm.memory_restored",
        memory_id=restored.revision.memory_id,
        tool_call_id=tool_call_id,
        actor=actor,
    )
    return restored


def _print_unchanged(
    unchanged: UnchangedMemory, revision_id: int, *, as_json: bool, out: TextIO
) -> None:
    """A restore that found the memory as it was before the revision: it says so."""
    if as_json:
        fields = {
            "memory_id": unchanged.memory_id,
            "restored_before_revision": revision_id,
            "content": unchanged.content,
            "changed": False,
        }
        print(json_document(fields), file=out)
        return
    print_fields(
        [
            ("memory", str(unchanged.memory_id)),
            ("already as before revision", str(revision_id)),
            (
                "content",
                "(does not exist)"
                if unchanged.content is None
                else shown_content(unchanged.content, width=None),
            ),
            ("changed", "nothing: no revision, no event"),
        ],
        out,
    )
