"""`ltm audit tail|history`."""

from __future__ import annotations

import argparse
from typing import Any

from ltm.arguments.common import UsageProblem, add_command, json_flag, on_parsed
from operators.audit_stream import BadStart, parse_start
from worker.ops.commands import ShowHistory, TailAudit

__all__ = ["add_audit"]


def add_audit(commands: Any) -> None:
    audit = add_command(commands, "audit", "the audit stream and the memories' revisions")
    actions = audit.add_subparsers(
        dest="audit_command", required=True, metavar="ACTION", title="actions"
    )
    tail = add_command(
        actions,
        "tail",
        "print the audit stream from an offset, one line per event",
        "Without --follow it ends once it has printed what the stream held when it began.",
    )
    tail.add_argument(
        "--from",
        dest="start",
        default="first",
        metavar="first|last|TIME",
        help="where to start: the first event kept, the last event, or the first event at or "
        "after TIME (RFC 3339, or 'YYYY-MM-DD HH:MM', UTC unless it says otherwise; "
        "default: first)",
    )
    tail.add_argument("--follow", action="store_true", help="keep printing new events until Ctrl-C")
    json_flag(tail, "tail")
    on_parsed(tail, _tail_audit)
    history = add_command(
        actions,
        "history",
        "a memory's revisions, oldest first",
        "`ltm memory restore REVISION` puts the memory back as it was before a revision "
        "(its BEFORE). Contents are cut at 40 columns here; --json has them whole.",
    )
    history.add_argument("memory_id", type=int, metavar="MEMORY_ID", help="the memory's id")
    json_flag(history, "history")
    on_parsed(history, lambda args: ShowHistory(memory_id=args.memory_id, as_json=args.as_json))


def _tail_audit(args: argparse.Namespace) -> TailAudit:
    try:
        start = parse_start(args.start)
    except BadStart as error:
        raise UsageProblem(str(error)) from None
    return TailAudit(start=start, follow=bool(args.follow), as_json=bool(args.as_json))
