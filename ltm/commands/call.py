"""`ltm call FILE`: publish one tool call and print its answer, for trying things by hand.
The call file is read before anything is connected, so that a missing one is a usage error."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import orjson
from aio_pika.exceptions import ChannelNotFoundEntity

from contracts import UPDATE_LONG_TERM_MEMORY, InvalidEnvelope, encode_event
from infra.settings import Settings
from ltm.commands.common import add_command, run_async
from operators.display import ExitCode, json_document, print_fields, shown_text

if TYPE_CHECKING:
    from operators.tool_call import ReceivedResult

__all__ = ["add", "call_and_print", "print_answer"]


def add(commands: Any) -> None:
    call = add_command(
        commands,
        "call",
        "publish one tool call and print its result",
        "FILE holds a tool_call.requested, or only some of its fields (tool_name, arguments, "
        "context): the envelope (event_id, tool_call_id, ...) is filled in. A tool name no "
        "queue is bound for is refused at once. Exit code 0 when the call succeeded, 1 when it "
        "was answered success: false, refused, or not answered in time.",
    )
    call.add_argument(
        "file", nargs="?", metavar="FILE", help="the call as JSON; - reads it from stdin"
    )
    call.add_argument(
        "--json",
        dest="json",
        nargs="?",
        const=True,
        default=False,
        metavar="FILE",
        help="print the result as the tool_call.completed event's JSON; `--json FILE`, the "
        "older spelling, still works",
    )
    call.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        metavar="S",
        help="how long to wait for the result, in seconds (default: 30)",
    )
    # The parser itself: a call file that is missing or unreadable is its usage error.
    call.set_defaults(run=_run, call_parser=call)


def _run(args: argparse.Namespace, settings: Settings) -> int:
    body = _read_call(args, args.call_parser)
    return run_async(
        call_and_print(settings, body, timeout=float(args.timeout), as_json=bool(args.json))
    )


def _read_call(args: argparse.Namespace, parser: argparse.ArgumentParser) -> bytes:
    """The call file: positional, or after `--json` (the older spelling)."""
    older: str | None = args.json if isinstance(args.json, str) else None
    if args.file is not None and older is not None:
        parser.error("give the call file once: ltm call FILE [--json]")
    path: str | None = args.file or older
    if path is None:
        parser.error("the call file is missing: ltm call FILE (- reads stdin)")
    if path == "-":
        return sys.stdin.buffer.read()
    try:
        return Path(path).read_bytes()
    except OSError as error:
        parser.error(f"cannot read {path}: {error.strerror or error}")


async def call_and_print(
    settings: Settings,
    body: bytes,
    *,
    timeout: float = 30.0,
    as_json: bool = False,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Publishes the call in `body` (the file's bytes, as read) and prints its answer.

    Exit code 0 when the call succeeded; 1 when it was answered `success: false`, was
    refused by the broker, or got no answer in time; 2 when `body` is not a tool call.
    """
    # Imported when used: `ltm worker` loads none of the operators' code.
    from operators.tool_call import Unroutable, complete_envelope, publish_and_wait

    out, err = out or sys.stdout, err or sys.stderr
    try:
        call = complete_envelope(body)
    except InvalidEnvelope as error:
        print(f"ltm call: the file is not a tool call: {error}", file=err)
        return ExitCode.USAGE
    topology = settings.topology

    def say_published(trace_id: str | None) -> None:
        traced = f" (trace {trace_id})" if trace_id else ""
        print(f"published tool call {call.tool_call_id}{traced}; waiting for its result", file=err)

    try:
        answer = await publish_and_wait(settings, call, timeout, say_published)
    except Unroutable:
        print(
            f"ltm call: no queue is bound for tool {call.tool_name} on "
            f"{topology.tool_calls_exchange}: the broker returned the call, nothing was done "
            f"(the memory worker takes {UPDATE_LONG_TERM_MEMORY})",
            file=err,
        )
        return ExitCode.FAILED
    except ChannelNotFoundEntity as error:
        print(f"ltm call: {error.args[-1]}: run `ltm topology` first", file=err)
        return ExitCode.FAILED
    except TimeoutError:
        print(
            f"ltm call: the call was queued but no result came within {timeout:g} s "
            "(is a worker running?)",
            file=err,
        )
        return ExitCode.FAILED
    print_answer(answer, as_json=as_json, out=out, err=err)
    return ExitCode.OK if answer.result.success else ExitCode.FAILED


def print_answer(answer: ReceivedResult, *, as_json: bool, out: TextIO, err: TextIO) -> None:
    """The result as fields for a person, or the `tool_call.completed` event as JSON; a note
    when it came from the idempotency record (to stderr with `as_json`)."""
    result = answer.result
    if as_json:
        print(json_document(orjson.loads(encode_event(result))), file=out)
    else:
        fields = [
            ("tool call", result.tool_call_id),
            ("success", "yes" if result.success else "no"),
            ("status", result.status.value),
            ("message", result.message),
            *(
                (name.replace("_", " "), _field_text(value))
                for name, value in result.data.model_dump(mode="json").items()
            ),
        ]
        print_fields([(name, shown_text(text)) for name, text in fields], out)
    if answer.replayed:
        already = "applied" if result.success else "answered this way"
        print(
            f"answered from the idempotency record: the call was already {already}; "
            "nothing changed now",
            file=err if as_json else out,
        )


def _field_text(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ", ".join(str(item) for item in value)
    return str(value)
