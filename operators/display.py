"""How the operators' tools show things, one way for the `ltm` commands and the console: exit
codes, tables, text, times, JSON, and what else an audit event says.

In text mode everything goes to stdout for a person to read: tables with a header of labelled
columns, text shown as text (control characters escaped, so that one row is one line), absent
values as "-". With `--json` stdout holds only JSON (one document, or one per line for a
stream), and notes for a person go to stderr.
"""

from __future__ import annotations

import signal
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from enum import IntEnum
from typing import TYPE_CHECKING, Any, Final, Literal, TextIO

import orjson

from contracts import (
    CacheInvalidate,
    DeadLettersPurged,
    DeadLettersReplayed,
    EmbedRequested,
    Event,
    MemoryChanged,
    ToolCallCompleted,
    ToolCallRequested,
)

if TYPE_CHECKING:
    from operators.revision_store import ChangeTexts

__all__ = [
    "ABSENT",
    "CONTENT_PREVIEW",
    "ERASED",
    "BadTime",
    "ExitCode",
    "event_details",
    "json_document",
    "json_line",
    "parsed_time",
    "print_fields",
    "print_table",
    "shown_content",
    "shown_text",
    "shown_time",
    "table_lines",
    "text_width",
]

ABSENT: Final = "-"
# A text an erasure took out of its revision: the audit trail keeps that the change happened.
ERASED: Final = "[erased]"
# Columns a memory's content takes in a table or a tail line; `--json` has it whole.
CONTENT_PREVIEW: Final = 40
_ELLIPSIS: Final = "…"
_GAP: Final = "  "
# Joins the emoji of one picture (👩‍💻): escaping it would break the picture into pieces.
_ZERO_WIDTH_JOINER: Final = "\u200d"
_ESCAPES: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


class ExitCode(IntEnum):
    """What a script can rely on, for every command."""

    OK = 0
    # A failure, a refusal, or a tool call answered `success: false`.
    FAILED = 1
    # Bad arguments, or a file that is not what the command takes (as argparse's own errors).
    USAGE = 2
    # The memory, revision or dead letter named does not exist.
    NOT_FOUND = 3
    # The reader went away (`| head`): the code a shell shows for a command ended by SIGPIPE.
    OUTPUT_CLOSED = 128 + signal.SIGPIPE


def shown_text(text: str | None, width: int | None = None) -> str:
    """Text on one line: newlines, other control characters and invisible format characters
    escaped (`\\n`, `\\u200b`); cut to `width` columns with "…"; None as "-"."""
    if text is None:
        return ABSENT
    shown = "".join(_escaped(character) for character in text)
    if width is None or text_width(shown) <= width:
        return shown
    kept, used = [], 0
    for character in shown:
        used += _character_width(character)
        if used > width - 1:
            break
        kept.append(character)
    return "".join(kept) + _ELLIPSIS


def shown_content(content: str | None, width: int | None = CONTENT_PREVIEW) -> str:
    """A memory's content as `shown_text`; None (after a delete) as "(deleted)", and the empty
    content before the restore of a deleted memory as "(none)"."""
    if content is None:
        return "(deleted)"
    if not content:
        return "(none)"
    return shown_text(content, width)


def _escaped(character: str) -> str:
    if character in _ESCAPES:
        return _ESCAPES[character]
    category = unicodedata.category(character)
    if category == "Cc" or (category == "Cf" and character != _ZERO_WIDTH_JOINER):
        code = ord(character)
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    return character


def text_width(text: str) -> int:
    """Columns `text` takes in a terminal: wide East Asian characters and most emoji take
    two, combining marks none."""
    return sum(_character_width(character) for character in text)


def _character_width(character: str) -> int:
    if unicodedata.combining(character) or character == _ZERO_WIDTH_JOINER:
        return 0
    return 2 if unicodedata.east_asian_width(character) in ("W", "F") else 1


def shown_time(
    value: datetime | None, timespec: Literal["seconds", "milliseconds"] = "seconds"
) -> str:
    """RFC 3339 in UTC with a `Z`; None as "-"."""
    if value is None:
        return ABSENT
    moment = value if value.tzinfo else value.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec=timespec).replace("+00:00", "Z")


class BadTime(ValueError):
    """A time an operator gave that is not one."""


def parsed_time(text: str) -> datetime:
    """A time as operators give it: RFC 3339 (`2026-12-04T10:00:00Z`) or `YYYY-MM-DD HH:MM`;
    without an offset it is UTC."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise BadTime(
            f"not a time: {text!r} (give RFC 3339, such as 2026-12-04T10:00:00Z, "
            "or 'YYYY-MM-DD HH:MM' in UTC)"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def table_lines(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """An aligned table: each column as wide as its widest cell, two spaces apart; the last
    column, where the long text goes, is not padded."""
    lines = [tuple(header), *(tuple(row) for row in rows)]
    widths = [max(text_width(line[column]) for line in lines) for column in range(len(header))]
    return [
        _GAP.join(
            cell + " " * (widths[column] - text_width(cell)) if column < len(line) - 1 else cell
            for column, cell in enumerate(line)
        )
        for line in lines
    ]


def print_table(header: Sequence[str], rows: Iterable[Sequence[str]], out: TextIO) -> None:
    for line in table_lines(header, rows):
        print(line, file=out)


def print_fields(fields: Sequence[tuple[str, str]], out: TextIO) -> None:
    """One thing described: a labelled value a line, the values aligned."""
    width = max((len(label) for label, _ in fields), default=0) + 1
    for label, value in fields:
        print(f"{label + ':':<{width}}  {value}", file=out)


def json_document(value: Any) -> str:
    """One JSON document, indented for a person who reads it too."""
    return orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_UTC_Z).decode()


def json_line(value: Any) -> str:
    """One JSON value on one line (JSON lines: one per event of a stream)."""
    return orjson.dumps(value, option=orjson.OPT_UTC_Z).decode()


def event_details(event: Event, texts: ChangeTexts | None = None) -> Iterator[str]:
    """What else an event says, beyond its time, type, memory, revision and tool call: the
    last column of `ltm audit tail`, and the console's audit page. A `memory.*` event's texts
    are its revision's (`texts`; None when that revision was not found)."""
    if isinstance(event, MemoryChanged):
        yield event.scope
        yield f"guild={event.guild_id or 'dm'}"
        if event.owner_id:
            yield f"owner={event.owner_id}"
        yield f"actor={shown_text(event.actor_id)}"
        if texts is None:
            yield f"(revision {event.revision_id} not found)"
        elif texts.erased:
            yield f"before: {ERASED} after: {ERASED}"
        else:
            yield f"before: {shown_content(texts.content_before)}"
            yield f"after: {shown_content(texts.content_after)}"
    elif isinstance(event, ToolCallCompleted):
        yield event.status.value
        if event.data.scope is not None:
            yield event.data.scope
        yield f"shard={event.shard_id}"
    elif isinstance(event, EmbedRequested):
        yield event.kind
        yield f"channel={event.channel_id}"
        yield f"shard={event.shard_id}"
    elif isinstance(event, CacheInvalidate):
        yield f"cache={event.cache}"
        yield f"key={event.key}"
    elif isinstance(event, ToolCallRequested):
        yield shown_text(event.tool_name)
        yield f"guild={event.context.guild_id or 'dm'}"
    elif isinstance(event, DeadLettersReplayed):
        yield f"actor={shown_text(event.actor)}"
        yield f"replayed={len(event.replayed)}"
        yield f"failed={event.failed}"
        if event.filter:
            yield "filter=" + ",".join(f"{name}:{value}" for name, value in event.filter.items())
        if event.reason is not None:
            yield f"reason={shown_text(event.reason)}"
    elif isinstance(event, DeadLettersPurged):
        yield f"actor={shown_text(event.actor)}"
        yield f"removed={event.removed}"
        if event.filter:
            yield "filter=" + ",".join(f"{name}:{value}" for name, value in event.filter.items())
