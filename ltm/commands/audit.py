"""`ltm audit tail|history`: the audit stream from an offset, one line per event, and a
memory's revisions, printed.

`ltm audit tail` without `--follow` ends once it has printed what the stream held when it
began (`operators.audit_reading` says how it knows). A lost broker connection ends the tail,
with or without `--follow`, with exit code 1.

The stream holds no memory text: each `memory.*` event's texts are read from its revision row
(`revision_id`), one query per batch of events, and shown as `[erased]` once an erasure
redacted them. `--json` prints each event as it is on the stream, plus, on a `memory.*` line,
`content_before`, `content_after` (from the revision; null after a redaction) and `erased`.
A `memory.*` event of schema_version 1, from before that upgrade, is shown the same way: the
texts it still carries are never printed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import signal
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, TextIO

import orjson
from aio_pika.exceptions import ChannelNotFoundEntity

from contracts import Event, MemoryChanged, ToolCallCompleted
from infra.settings import Settings
from ltm.commands.common import UsageProblem, add_command, json_flag, run_async
from operators.display import (
    ABSENT,
    ExitCode,
    event_details,
    json_document,
    print_table,
    shown_content,
    shown_text,
    shown_time,
    text_width,
)

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from operators.audit_stream import AuditDelivery, StreamStart
    from operators.revision_store import ChangeTexts, Revision

__all__ = [
    "HISTORY_HEADER",
    "TAIL_HEADER",
    "add",
    "event_line",
    "history_rows",
    "json_line_with_texts",
    "print_history",
    "tail_audit",
    "unreadable_line",
]


def add(commands: Any) -> None:
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
    json_flag(
        tail,
        "print each event's JSON body, one a line (JSON lines); a memory.* line gets its "
        "revision's content_before, content_after and erased",
    )
    tail.set_defaults(run=_run_tail)
    history = add_command(
        actions,
        "history",
        "a memory's revisions, oldest first",
        "`ltm memory restore REVISION` puts the memory back as it was before a revision "
        "(its BEFORE). Contents are cut at 40 columns here; --json has them whole.",
    )
    history.add_argument("memory_id", type=int, metavar="MEMORY_ID", help="the memory's id")
    json_flag(history, "print a JSON array of the revisions, contents whole")
    history.set_defaults(
        run=lambda args, settings: run_async(
            print_history(settings, args.memory_id, as_json=args.as_json)
        )
    )


def _run_tail(args: argparse.Namespace, settings: Settings) -> int:
    from operators.audit_stream import BadStart, parse_start

    try:
        start = parse_start(args.start)
    except BadStart as error:
        raise UsageProblem(str(error)) from None
    return run_async(
        tail_audit(settings, start, follow=bool(args.follow), as_json=bool(args.as_json))
    )


def _columns(*cells: str) -> str:
    """One line of the tail: fixed widths (a stream's widest cell is never known), so that a
    longer cell pushes only its own line."""
    padded = [
        cell + " " * (width - text_width(cell))
        for cell, (_, width) in zip(cells[:-1], _TAIL_COLUMNS, strict=False)
    ]
    return "  ".join([*padded, cells[-1]])


_TAIL_COLUMNS: Final = (
    ("TIME", 24),
    ("EVENT", 19),
    ("MEMORY", 8),
    ("REVISION", 8),
    ("TOOL CALL", 36),
    ("DETAILS", 0),
)
TAIL_HEADER: Final = _columns(*(name for name, _ in _TAIL_COLUMNS))


def event_line(event: Event, texts: ChangeTexts | None = None) -> str:
    """One line under `TAIL_HEADER`: time, event type, memory, revision, tool call, then what
    else the event says (a `memory.*` event's texts are its revision's, `texts`)."""
    memory_id: int | None = None
    revision_id: int | None = None
    if isinstance(event, MemoryChanged):
        memory_id, revision_id = event.memory_id, event.revision_id
    elif isinstance(event, ToolCallCompleted):
        memory_id = event.data.memory_id
    return _columns(
        shown_time(event.occurred_at, "milliseconds"),
        event.event_type,
        ABSENT if memory_id is None else str(memory_id),
        ABSENT if revision_id is None else str(revision_id),
        shown_text(event.correlation_id),
        " ".join(event_details(event, texts)),
    )


def unreadable_line(delivery: AuditDelivery) -> str:
    message = delivery.message
    return _columns(
        shown_time(message.timestamp, "milliseconds"),
        "(not an event)",
        ABSENT,
        ABSENT,
        shown_text(message.correlation_id),
        f"routing key {message.routing_key}: {shown_text(delivery.problem)}",
    )


_TEXT_FIELDS: Final = ("content_before", "content_after")


def json_line_with_texts(delivery: AuditDelivery, texts: Mapping[int, ChangeTexts]) -> str | None:
    """The delivery's body on one line; on a `memory.*` line, the texts of its revision added
    (null when the revision was redacted or not found) with `erased`. Texts a body of
    schema_version 1 still carries are replaced, never printed. None for a body not JSON."""
    try:
        body = orjson.loads(delivery.message.body)
    except orjson.JSONDecodeError:
        return None
    if isinstance(body, dict) and str(body.get("event_type", "")).startswith("memory."):
        for name in _TEXT_FIELDS:
            body.pop(name, None)
        event = delivery.event
        found = texts.get(event.revision_id) if isinstance(event, MemoryChanged) else None
        body["content_before"] = None if found is None else found.content_before
        body["content_after"] = None if found is None else found.content_after
        body["erased"] = found is not None and found.erased
    # Re-encoded compactly: one event, one line, whatever the producer's formatting.
    return orjson.dumps(body).decode()


async def tail_audit(
    settings: Settings,
    start: StreamStart = "first",
    *,
    follow: bool = False,
    as_json: bool = False,
    out: TextIO | None = None,
    err: TextIO | None = None,
    stop: asyncio.Event | None = None,
    idle_s: float | None = None,
) -> int:
    """Prints the audit stream from `start`; with `follow`, until SIGINT/SIGTERM
    (or `stop` when given).

    Exit code 0; 1 when the stream does not exist or the broker connection is lost.
    """
    # Imported when used: `ltm worker` loads none of the operators' code.
    from operators.audit_reading import IDLE_S, read_audit

    out, err = out or sys.stdout, err or sys.stderr
    # A caller's own event (tests, an embedding process) replaces the signal handlers.
    on_signals = stop is None
    stop = stop or asyncio.Event()
    from sqlalchemy.exc import DBAPIError

    from operators.engines import one_shot_engine

    stream = settings.topology.audit_stream
    try:
        async with one_shot_engine(settings) as engine:
            printer = _TailPrinter(start, as_json, out, err, engine)
            with _stop_on_signals(stop, enabled=on_signals):
                broken = await read_audit(
                    settings,
                    start,
                    printer.print,
                    follow=follow,
                    stop=stop,
                    idle_s=IDLE_S if idle_s is None else idle_s,
                )
    except ChannelNotFoundEntity:
        print(f"{stream} does not exist: run `ltm topology` first", file=err)
        return ExitCode.FAILED
    except DBAPIError as error:
        # The texts are the database's: without it the tail cannot show a change.
        print(
            f"the database is unreachable, the changes' texts cannot be read: "
            f"{type(error).__name__}",
            file=err,
        )
        return ExitCode.FAILED
    if broken:
        print("the broker connection was lost; the tail ended early", file=err)
        return ExitCode.FAILED
    if not follow:
        printer.say_if_empty(stream)
    return ExitCode.OK


@dataclass(slots=True)
class _TailPrinter:
    origin: StreamStart
    as_json: bool
    out: TextIO
    err: TextIO
    engine: AsyncEngine
    printed: int = 0

    async def print(self, batch: Sequence[AuditDelivery]) -> None:
        from operators.revision_store import RevisionStore

        texts = await RevisionStore(self.engine).texts(
            [d.event.revision_id for d in batch if isinstance(d.event, MemoryChanged)]
        )
        for delivery in batch:
            self._print_one(delivery, texts)

    def _print_one(self, delivery: AuditDelivery, texts: Mapping[int, ChangeTexts]) -> None:
        event = delivery.event
        if self.as_json:
            line = json_line_with_texts(delivery, texts)
            if line is None:
                from operators.audit_stream import stream_offset

                offset = stream_offset(delivery.message)
                print(f"offset {offset}: not JSON, skipped ({delivery.problem})", file=self.err)
                return
        else:
            if not self.printed:
                print(TAIL_HEADER, file=self.out)
            if event is None:
                line = unreadable_line(delivery)
            else:
                found = texts.get(event.revision_id) if isinstance(event, MemoryChanged) else None
                line = event_line(event, found)
        print(line, file=self.out, flush=True)
        self.printed += 1

    def say_if_empty(self, stream: str) -> None:
        """In text mode, a line for a window without events, where a person expects one."""
        if self.printed or self.as_json:
            return
        since = (
            f" at or after {shown_time(self.origin)}" if isinstance(self.origin, datetime) else ""
        )
        print(f"no events in {stream}{since}", file=self.out)


@contextlib.contextmanager
def _stop_on_signals(stop: asyncio.Event, *, enabled: bool) -> Iterator[None]:
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    if enabled:
        for signum in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(signum, stop.set)
            except (NotImplementedError, RuntimeError, ValueError):
                continue  # not the main thread, or no signals here: `stop` still works
            installed.append(signum)
    try:
        yield
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)


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
    from operators.engines import one_shot_engine
    from operators.revisions import revision_history

    out, err = out or sys.stdout, err or sys.stderr
    async with one_shot_engine(settings) as engine:
        revisions = await revision_history(engine, memory_id)
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
