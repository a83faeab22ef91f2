"""`ltm dlq list|replay|purge`: the dead-letter queue, listed, replayed and purged, printed."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, TextIO

from aio_pika.exceptions import ChannelNotFoundEntity

from contracts import Topology
from infra.settings import Settings
from ltm.commands.common import add_command, json_flag, run_async
from operators.display import ABSENT, ExitCode, json_document, print_table, shown_text, shown_time

if TYPE_CHECKING:
    from operators.dead_letters import DeadLetter, ReplayReport

__all__ = [
    "DEAD_LETTER_HEADER",
    "add",
    "dead_letter_rows",
    "list_dead_letters",
    "purge_dead_letters",
    "replay_dead_letters",
    "replay_exit_code",
]


def add(commands: Any) -> None:
    dlq = add_command(
        commands,
        "dlq",
        "the dead-letter queue: calls the worker or the broker gave up on",
        "Each keeps its body, routing key and properties, with why and when it was given up on.",
    )
    actions = dlq.add_subparsers(
        dest="dlq_command", required=True, metavar="ACTION", title="actions"
    )
    listing = add_command(
        actions,
        "list",
        "show the dead-lettered calls (nothing is consumed)",
        "At most the first 10,000. Each is handed back to the queue when the listing ends.",
    )
    json_flag(listing, "print a JSON array, one object per dead letter")
    listing.set_defaults(
        run=lambda args, settings: run_async(list_dead_letters(settings, as_json=args.as_json))
    )
    replay = add_command(
        actions,
        "replay",
        "send dead-lettered calls back to the worker",
        "Each goes back to the tool-call exchange with its original routing key and properties, "
        "and leaves the dead-letter queue once the broker confirmed it. A call that was already "
        "applied is answered from the idempotency record and changes nothing.",
    )
    which = replay.add_mutually_exclusive_group(required=True)
    which.add_argument("--all", action="store_true", help="every dead letter there is now")
    which.add_argument(
        "--id", dest="event_id", metavar="EVENT_ID", help="the dead letter with this event id"
    )
    json_flag(replay, "print one JSON object: what was replayed and what failed")
    replay.set_defaults(run=_run_replay)
    purge = add_command(actions, "purge", "remove every dead-lettered call")
    purge.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    json_flag(purge, "print one JSON object with the number removed")
    purge.set_defaults(run=_run_purge)


def _run_replay(args: argparse.Namespace, settings: Settings) -> int:
    # argparse lets exactly one of --all and --id through: no id means every dead letter.
    return run_async(replay_dead_letters(settings, args.event_id, as_json=args.as_json))


def _run_purge(args: argparse.Namespace, settings: Settings) -> int:
    return run_async(purge_dead_letters(settings, yes=args.yes, as_json=args.as_json))


DEAD_LETTER_HEADER: Final = (
    "EVENT ID",
    "TOOL CALL",
    "FAILED AT",
    "ATTEMPTS",
    "ROUTING KEY",
    "SOURCE",
    "REASON",
)


def dead_letter_rows(entries: Sequence[DeadLetter]) -> list[tuple[str, ...]]:
    """The rows of `ltm dlq list`, one per dead letter, under `DEAD_LETTER_HEADER`."""
    return [
        (
            shown_text(entry.event_id),
            shown_text(entry.tool_call_id),
            shown_time(entry.failed_at),
            ABSENT if entry.attempts is None else str(entry.attempts),
            shown_text(entry.routing_key or None),
            entry.source,
            shown_text(entry.reason),
        )
        for entry in entries
    ]


async def list_dead_letters(
    settings: Settings,
    *,
    as_json: bool = False,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """`ltm dlq list`: a table of the dead letters (the first `DEFAULT_LIMIT`), or a JSON
    array of them; exit code 0, 1 when there is no queue."""
    # Imported when used: `ltm worker` loads none of the operators' code.
    from operators.dead_letters import inspect_dead_letters

    out, err = out or sys.stdout, err or sys.stderr
    try:
        entries, total = await inspect_dead_letters(settings)
    except ChannelNotFoundEntity:
        return _missing_queue(settings, err)
    shown = f"the first {len(entries)} of {total}" if total > len(entries) else f"{len(entries)}"
    if as_json:
        print(json_document([dataclasses.asdict(entry) for entry in entries]), file=out)
        if total > len(entries):
            print(f"{shown} dead-lettered message(s) listed", file=err)
    elif not entries:
        print(f"{settings.topology.dead_letter_queue} is empty", file=out)
    else:
        print_table(DEAD_LETTER_HEADER, dead_letter_rows(entries), out)
        print(f"{shown} dead-lettered message(s)", file=out)
    return ExitCode.OK


async def replay_dead_letters(
    settings: Settings,
    event_id: str | None,
    *,
    as_json: bool = False,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """`ltm dlq replay --id EVENT_ID | --all` (`event_id` None): republishes to
    `<prefix>.tool_calls` with the original routing key and properties; each dead-letter copy
    is acked only after the broker confirmed its replay. Exit code 1 for a failed replay, 3
    for an unknown id."""
    from operators.dead_letters import replay

    out, err = out or sys.stdout, err or sys.stderr
    try:
        report = await replay(settings, event_id=event_id)
    except ChannelNotFoundEntity:
        return _missing_queue(settings, err)
    _print_replays(report, settings.topology, as_json, out, err)
    return replay_exit_code(report)


def replay_exit_code(report: ReplayReport) -> ExitCode:
    if report.unknown_id is not None:
        return ExitCode.NOT_FOUND
    return ExitCode.OK if report.complete else ExitCode.FAILED


def _print_replays(
    report: ReplayReport, topology: Topology, as_json: bool, out: TextIO, err: TextIO
) -> None:
    for replayed in report.replays:
        entry = replayed.entry
        if replayed.error is not None:
            print(
                f"could not replay {entry.event_id}: {replayed.error}; it stays dead-lettered",
                file=err,
            )
        elif not as_json:
            print(
                f"replayed {entry.event_id} (tool call {shown_text(entry.tool_call_id)}) "
                f"to {topology.tool_calls_exchange} with routing key {entry.routing_key}",
                file=out,
            )
    if report.unknown_id is not None:
        print(
            f"no dead-lettered message with event id {report.unknown_id} "
            f"({report.total} message(s) looked at)",
            file=err,
        )
    elif report.whole_queue:
        print(_replay_summary(report, topology), file=err if as_json else out)
    if as_json:
        document = {
            "replayed": [_replay_fields(entry) for entry in report.replayed],
            "failed": [
                {**_replay_fields(failed.entry), "error": failed.error} for failed in report.failed
            ],
            "not_reached": report.not_reached,
        }
        print(json_document(document), file=out)


def _replay_summary(report: ReplayReport, topology: Topology) -> str:
    if report.total == 0:
        return f"{topology.dead_letter_queue} is empty"
    not_reached = report.not_reached
    note = f"; {not_reached} not reached, run it again" if not_reached else ""
    return f"replayed {len(report.replayed)} of {report.total} dead-lettered message(s){note}"


def _replay_fields(entry: DeadLetter) -> dict[str, str | None]:
    return {
        "event_id": entry.event_id,
        "tool_call_id": entry.tool_call_id,
        "routing_key": entry.routing_key,
    }


async def purge_dead_letters(
    settings: Settings,
    *,
    yes: bool = False,
    as_json: bool = False,
    out: TextIO | None = None,
    err: TextIO | None = None,
    stdin: TextIO | None = None,
) -> int:
    """`ltm dlq purge [--yes]`: empties the queue, after asking on `stdin` unless `yes`.
    Exit code 1 when the answer is not yes (or stdin is closed)."""
    from operators.dead_letters import purge

    out, err, reader = out or sys.stdout, err or sys.stderr, stdin or sys.stdin
    # With --json stdout holds the JSON alone: the question and the notes go to stderr.
    notes = err if as_json else out

    async def confirm(count: int, queue: str) -> bool:
        if yes:
            return True
        print(f"remove {count} dead-lettered message(s) from {queue}? [y/N] ", end="", file=notes)
        notes.flush()
        # Off the event loop: the connection's heartbeats go on while the operator thinks.
        answer = await asyncio.to_thread(reader.readline)
        return answer.strip().lower() in ("y", "yes")

    try:
        done = await purge(settings, confirm=confirm)
    except ChannelNotFoundEntity:
        return _missing_queue(settings, err)
    code = ExitCode.OK
    if done.found == 0 and not done.removed:
        print(f"{done.queue} is empty", file=notes)
    elif done.refused:
        # Not 0: a script that ran it without --yes must not take it as done.
        print("nothing removed (answer y, or pass --yes)", file=notes)
        code = ExitCode.FAILED
    else:
        print(f"removed {done.removed} dead-lettered message(s)", file=notes)
    if as_json:
        print(json_document({"removed": done.removed}), file=out)
    return code


def _missing_queue(settings: Settings, err: TextIO) -> int:
    topology = settings.topology
    print(f"{topology.dead_letter_queue} does not exist: run `ltm topology` first", file=err)
    return ExitCode.FAILED
