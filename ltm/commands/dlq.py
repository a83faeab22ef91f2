"""`ltm dlq list|replay|purge`: the dead-letter queue, listed, replayed and purged, printed."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import getpass
import math
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, TextIO

from aio_pika.exceptions import ChannelNotFoundEntity

from contracts import Topology
from infra.settings import Settings
from ltm.commands.common import UsageProblem, add_command, json_flag, run_async
from operators.display import (
    ABSENT,
    BadTime,
    ExitCode,
    json_document,
    parsed_time,
    print_table,
    shown_text,
    shown_time,
)

if TYPE_CHECKING:
    from operators.dead_letters import DeadLetter, DeadLetterFilter, Purge, ReplayReport

# `--rate` when none is given (operators.dead_letters.DEFAULT_RATE, which the command line
# does not import before it runs).
_DEFAULT_RATE: Final = 50

__all__ = [
    "DEAD_LETTER_HEADER",
    "GROUP_HEADER",
    "add",
    "dead_letter_filter",
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
        "At most the first 10,000 (and of those, the ones that match the filters). Each is "
        "handed back to the queue when the listing ends.",
    )
    _filter_flags(listing)
    listing.add_argument(
        "--group", action="store_true", help="count them by reason and tool instead"
    )
    json_flag(
        listing,
        "print a JSON array, one object per dead letter (with --group: "
        "{reason, tool, count, first_failed_at, last_failed_at} per group)",
    )
    listing.set_defaults(run=_run_list)
    replay = add_command(
        actions,
        "replay",
        "send dead-lettered calls back to the worker",
        "Each goes back to the tool-call exchange with its original routing key and properties, "
        "and leaves the dead-letter queue once the broker confirmed it; the letters that do not "
        "match stay untouched and in place. A call that was already applied is answered from "
        "the idempotency record and changes nothing. Recorded as one "
        "operator.dead_letters_replayed event on the audit stream.",
    )
    which = replay.add_mutually_exclusive_group()
    which.add_argument("--all", action="store_true", help="every dead letter there is now")
    which.add_argument(
        "--id", dest="event_id", metavar="EVENT_ID", help="the dead letter with this event id"
    )
    _filter_flags(replay)
    replay.add_argument(
        "--reason",
        metavar="TEXT",
        help="why (recorded); required with --all or a filter",
    )
    replay.add_argument(
        "--rate",
        type=_rate,
        default=_DEFAULT_RATE,
        metavar="N",
        help=f"calls a second at most (default {_DEFAULT_RATE}; 0 for no limit)",
    )
    replay.add_argument("--dry-run", action="store_true", help="only say which would be replayed")
    _operator_flag(replay)
    json_flag(
        replay,
        "print one JSON object: what was replayed and what failed (with --dry-run: "
        '{"count": n, "letters": [{event_id, tool_call_id}]})',
    )
    replay.set_defaults(run=_run_replay)
    purge = add_command(
        actions,
        "purge",
        "remove every dead-lettered call, or those that match the filters",
        "A purge by filter removes only the matching letters (of the first 10,000) and is "
        "recorded as an operator.dead_letters_purged event on the audit stream.",
    )
    _filter_flags(purge)
    purge.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    _operator_flag(purge)
    json_flag(purge, "print one JSON object with the number removed")
    purge.set_defaults(run=_run_purge)


def _filter_flags(parser: argparse.ArgumentParser) -> None:
    filters = parser.add_argument_group("filters (a letter must match every one given)")
    filters.add_argument(
        "--error",
        metavar="SUBSTRING",
        help="in the reason (x-ltm-error, or the broker's x-death reason); any case",
    )
    filters.add_argument("--tool", metavar="NAME", help="the tool (its routing key)")
    filters.add_argument("--guild", metavar="ID", help="the server (context.guild_id of the body)")
    filters.add_argument(
        "--since",
        metavar="TIME",
        help="failed at or after (RFC 3339, or 'YYYY-MM-DD HH:MM'; UTC)",
    )


def _operator_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--operator",
        metavar="NAME",
        help="who does it, recorded as operator:NAME (default: the login name)",
    )


def _rate(text: str) -> float:
    rate = float(text)
    if rate < 0 or math.isnan(rate):
        raise argparse.ArgumentTypeError(f"a rate is 0 (no limit) or more calls a second: {text}")
    return rate


def dead_letter_filter(args: argparse.Namespace) -> DeadLetterFilter | None:
    """The filter the command line gives, None when it gives none. Raises `UsageProblem` for
    a `--since` that is not a time."""
    from operators.dead_letters import DeadLetterFilter

    try:
        since = None if args.since is None else parsed_time(args.since)
    except BadTime as error:
        raise UsageProblem(f"--since: {error}") from None
    given = DeadLetterFilter(error=args.error, tool=args.tool, guild=args.guild, since=since)
    return None if given.is_empty else given


def _actor(args: argparse.Namespace) -> str:
    name = args.operator
    if not name:
        try:
            name = getpass.getuser()
        except (KeyError, OSError):  # no login name in some containers
            name = "unknown"
    return f"operator:{name}"


def _run_list(args: argparse.Namespace, settings: Settings) -> int:
    return run_async(
        list_dead_letters(
            settings,
            dead_letter_filter=dead_letter_filter(args),
            group=args.group,
            as_json=args.as_json,
        )
    )


def _run_replay(args: argparse.Namespace, settings: Settings) -> int:
    chosen = dead_letter_filter(args)
    if args.event_id is not None and chosen is not None:
        raise UsageProblem("ltm dlq replay: --id or filters, not both")
    if args.all and chosen is not None:
        raise UsageProblem("ltm dlq replay: --all or filters, not both")
    if args.event_id is None and not args.all and chosen is None:
        raise UsageProblem("ltm dlq replay: say which: --id EVENT_ID, --all, or filters")
    return run_async(
        replay_dead_letters(
            settings,
            args.event_id,
            dead_letter_filter=chosen,
            reason=args.reason,
            rate=args.rate,
            dry_run=args.dry_run,
            actor=_actor(args),
            as_json=args.as_json,
        )
    )


def _run_purge(args: argparse.Namespace, settings: Settings) -> int:
    return run_async(
        purge_dead_letters(
            settings,
            dead_letter_filter=dead_letter_filter(args),
            yes=args.yes,
            actor=_actor(args),
            as_json=args.as_json,
        )
    )


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


GROUP_HEADER: Final = ("COUNT", "REASON", "TOOL", "FIRST FAILED", "LAST FAILED")


async def list_dead_letters(
    settings: Settings,
    *,
    dead_letter_filter: DeadLetterFilter | None = None,
    group: bool = False,
    as_json: bool = False,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """`ltm dlq list [FILTERS] [--group]`: a table of the dead letters (those of the first
    `DEFAULT_LIMIT` that match), or their counts by reason and tool; or a JSON array of
    either. Exit code 0, 1 when there is no queue."""
    # Imported when used: `ltm worker` loads none of the operators' code.
    from operators.dead_letters import DEFAULT_LIMIT, group_dead_letters, inspect_dead_letters

    out, err = out or sys.stdout, err or sys.stderr
    try:
        entries, total = await inspect_dead_letters(settings, dead_letter_filter=dead_letter_filter)
    except ChannelNotFoundEntity:
        return _missing_queue(settings, err)
    looked_at = min(total, DEFAULT_LIMIT)
    if dead_letter_filter is not None:
        shown = f"{len(entries)} of {looked_at} (matching)"
        if total > looked_at:
            shown += f", of the first {looked_at} of {total}"
    elif total > len(entries):
        shown = f"the first {len(entries)} of {total}"
    else:
        shown = f"{len(entries)}"
    if group:
        groups = group_dead_letters(entries)
        if as_json:
            print(json_document([dataclasses.asdict(each) for each in groups]), file=out)
        elif groups:
            rows = [
                (
                    str(each.count),
                    shown_text(each.reason),
                    shown_text(each.tool or None),
                    shown_time(each.first_failed_at),
                    shown_time(each.last_failed_at),
                )
                for each in groups
            ]
            print_table(GROUP_HEADER, rows, out)
    elif as_json:
        print(json_document([dataclasses.asdict(entry) for entry in entries]), file=out)
    elif entries:
        print_table(DEAD_LETTER_HEADER, dead_letter_rows(entries), out)
    if not entries and not as_json:
        nothing = "is empty" if total == 0 else "holds no dead letter that matches"
        print(f"{settings.topology.dead_letter_queue} {nothing}", file=out)
    elif as_json:
        if total > len(entries) or dead_letter_filter is not None:
            print(f"{shown} dead-lettered message(s) listed", file=err)
    else:
        print(f"{shown} dead-lettered message(s)", file=out)
    return ExitCode.OK


async def replay_dead_letters(
    settings: Settings,
    event_id: str | None,
    *,
    dead_letter_filter: DeadLetterFilter | None = None,
    reason: str | None = None,
    rate: float = _DEFAULT_RATE,
    dry_run: bool = False,
    actor: str = "operator:unknown",
    as_json: bool = False,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """`ltm dlq replay (--id EVENT_ID | --all | FILTERS) --reason TEXT` (`event_id` None and
    no filter: every dead letter): republishes to `<prefix>.tool_calls` with the original
    routing key and properties, at most `rate` a second; each dead-letter copy is acked only
    after the broker confirmed its replay. Records one `operator.dead_letters_replayed` event.
    Exit code 1 for a failed replay (or its record), 2 without a reason where one is needed,
    3 for an unknown id."""
    from operators.dead_letters import replay

    out, err = out or sys.stdout, err or sys.stderr
    if event_id is None and not (reason and reason.strip()):
        print("ltm dlq replay: --reason TEXT is required with --all or a filter", file=err)
        return ExitCode.USAGE
    if dry_run:
        return await _preview(
            settings, event_id, dead_letter_filter, as_json=as_json, out=out, err=err
        )
    try:
        report = await replay(
            settings, event_id=event_id, dead_letter_filter=dead_letter_filter, rate=rate
        )
    except ChannelNotFoundEntity:
        return _missing_queue(settings, err)
    _print_replays(report, settings.topology, as_json, out, err)
    code = replay_exit_code(report)
    if not await _recorded(settings, report, actor, reason, err):
        code = ExitCode.FAILED
    return code


async def _preview(
    settings: Settings,
    event_id: str | None,
    dead_letter_filter: DeadLetterFilter | None,
    *,
    as_json: bool,
    out: TextIO,
    err: TextIO,
) -> int:
    """`--dry-run`: the letters a replay would send back, consuming nothing."""
    from operators.dead_letters import inspect_dead_letters

    try:
        entries, _ = await inspect_dead_letters(settings, dead_letter_filter=dead_letter_filter)
    except ChannelNotFoundEntity:
        return _missing_queue(settings, err)
    if event_id is not None:
        entries = [entry for entry in entries if entry.event_id == event_id]
    if as_json:
        letters = [
            {"event_id": entry.event_id, "tool_call_id": entry.tool_call_id} for entry in entries
        ]
        print(json_document({"count": len(entries), "letters": letters}), file=out)
    else:
        if entries:
            print_table(DEAD_LETTER_HEADER, dead_letter_rows(entries), out)
        print(f"would replay {len(entries)} dead-lettered message(s); nothing done", file=out)
    if event_id is not None and not entries:
        print(f"no dead-lettered message with event id {event_id}", file=err)
        return ExitCode.NOT_FOUND
    return ExitCode.OK


async def _recorded(
    settings: Settings, report: ReplayReport, actor: str, reason: str | None, err: TextIO
) -> bool:
    """Writes the replay's audit record; whether it was written (a failure is said)."""
    from operators.operator_records import record_replay

    try:
        await record_replay(settings, report, actor=actor, reason=reason)
    except Exception as error:
        print(
            f"the dead letters were replayed, but the audit record of it could not be written "
            f"({type(error).__name__}: {error})",
            file=err,
        )
        return False
    return True


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
    elif report.whole_queue or report.dead_letter_filter is not None:
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
    if report.total == 0 and not report.unread:
        if report.dead_letter_filter is not None:
            return f"{topology.dead_letter_queue} holds no dead letter that matches"
        return f"{topology.dead_letter_queue} is empty"
    not_reached = report.not_reached
    note = f"; {not_reached} not reached, run it again" if not_reached else ""
    which = " matching" if report.dead_letter_filter is not None else ""
    return (
        f"replayed {len(report.replayed)} of {report.total}{which} dead-lettered message(s){note}"
    )


def _replay_fields(entry: DeadLetter) -> dict[str, str | None]:
    return {
        "event_id": entry.event_id,
        "tool_call_id": entry.tool_call_id,
        "routing_key": entry.routing_key,
    }


async def purge_dead_letters(
    settings: Settings,
    *,
    dead_letter_filter: DeadLetterFilter | None = None,
    yes: bool = False,
    actor: str = "operator:unknown",
    as_json: bool = False,
    out: TextIO | None = None,
    err: TextIO | None = None,
    stdin: TextIO | None = None,
) -> int:
    """`ltm dlq purge [FILTERS] [--yes]`: empties the queue, or removes the letters that match
    the filter (recorded as `operator.dead_letters_purged`), after asking on `stdin` unless
    `yes`. Exit code 1 when the answer is not yes (or stdin is closed)."""
    from operators.dead_letters import purge

    out, err, reader = out or sys.stdout, err or sys.stderr, stdin or sys.stdin
    # With --json stdout holds the JSON alone: the question and the notes go to stderr.
    notes = err if as_json else out
    which = "matching " if dead_letter_filter is not None else ""

    async def confirm(count: int, queue: str) -> bool:
        if yes:
            return True
        print(
            f"remove {count} {which}dead-lettered message(s) from {queue}? [y/N] ",
            end="",
            file=notes,
        )
        notes.flush()
        # Off the event loop: the connection's heartbeats go on while the operator thinks.
        answer = await asyncio.to_thread(reader.readline)
        return answer.strip().lower() in ("y", "yes")

    try:
        done = await purge(settings, confirm=confirm, dead_letter_filter=dead_letter_filter)
    except ChannelNotFoundEntity:
        return _missing_queue(settings, err)
    code = ExitCode.OK
    if done.found == 0 and not done.removed:
        nothing = "holds no dead letter that matches" if which else "is empty"
        print(f"{done.queue} {nothing}", file=notes)
    elif done.refused:
        # Not 0: a script that ran it without --yes must not take it as done.
        print("nothing removed (answer y, or pass --yes)", file=notes)
        code = ExitCode.FAILED
    else:
        print(f"removed {done.removed} {which}dead-lettered message(s)", file=notes)
        if dead_letter_filter is not None and not await _purge_recorded(
            settings, done, actor, dead_letter_filter, err
        ):
            code = ExitCode.FAILED
    if as_json:
        print(json_document({"removed": done.removed}), file=out)
    return code


async def _purge_recorded(
    settings: Settings,
    done: Purge,
    actor: str,
    dead_letter_filter: DeadLetterFilter,
    err: TextIO,
) -> bool:
    from operators.operator_records import record_purge

    try:
        await record_purge(settings, done, actor=actor, dead_letter_filter=dead_letter_filter)
    except Exception as error:
        print(
            f"the dead letters were removed, but the audit record of it could not be written "
            f"({type(error).__name__}: {error})",
            file=err,
        )
        return False
    return True


def _missing_queue(settings: Settings, err: TextIO) -> int:
    topology = settings.topology
    print(f"{topology.dead_letter_queue} does not exist: run `ltm topology` first", file=err)
    return ExitCode.FAILED
