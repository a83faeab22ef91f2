"""`ltm audit history` and `ltm memory restore`: a memory's revisions, and undoing one, printed."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from typing import Final, TextIO

from infra.settings import Settings
from operators.engines import one_shot_engine
from operators.revision_store import Revision, UnchangedMemory
from operators.revisions import restore_revision, revision_history
from worker.ops.commands import RestoreRevision, ShowHistory
from worker.ops.output import (
    ExitCode,
    json_document,
    print_fields,
    print_table,
    shown_content,
    shown_text,
    shown_time,
)

__all__ = ["HISTORY_HEADER", "history_rows", "print_history", "restore_and_print"]

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
    command: ShowHistory,
    *,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """`ltm audit history MEMORY_ID`: a table of the revisions, or a JSON array of them.
    Exit code 0; 3 when the memory has none."""
    out, err = out or sys.stdout, err or sys.stderr
    memory_id = command.memory_id
    async with one_shot_engine(settings) as engine:
        revisions = await revision_history(engine, memory_id)
    if command.as_json:
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


async def restore_and_print(
    settings: Settings,
    command: RestoreRevision,
    *,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """`ltm memory restore REVISION`: `restore_revision`, printed.

    Exit code 0 (also when there was nothing to change); 3 when there is no such revision.
    """
    out, err = out or sys.stdout, err or sys.stderr
    revision_id, as_json = command.revision_id, command.as_json
    restored = await restore_revision(settings, revision_id, actor=command.actor)
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
