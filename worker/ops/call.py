"""`ltm call FILE`: publish one tool call and print its answer, for trying things by hand."""

from __future__ import annotations

import sys
from typing import Any, TextIO

import orjson
from aio_pika.exceptions import ChannelNotFoundEntity

from contracts import UPDATE_LONG_TERM_MEMORY, InvalidEnvelope, encode_event
from infra.settings import Settings
from operators.tool_call import ReceivedResult, Unroutable, complete_envelope, publish_and_wait
from worker.ops.commands import CallTool
from worker.ops.output import ExitCode, json_document, print_fields, shown_text

__all__ = ["call_and_print", "print_answer"]


async def call_and_print(
    settings: Settings,
    command: CallTool,
    *,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Publishes the call in the command's body and prints its answer.

    Exit code 0 when the call succeeded; 1 when it was answered `success: false`, was
    refused by the broker, or got no answer in time; 2 when `body` is not a tool call.
    """
    out, err = out or sys.stdout, err or sys.stderr
    try:
        call = complete_envelope(command.body)
    except InvalidEnvelope as error:
        print(f"ltm call: the file is not a tool call: {error}", file=err)
        return ExitCode.USAGE
    topology = settings.topology

    def say_published(trace_id: str | None) -> None:
        traced = f" (trace {trace_id})" if trace_id else ""
        print(f"published tool call {call.tool_call_id}{traced}; waiting for its result", file=err)

    try:
        answer = await publish_and_wait(settings, call, command.timeout, say_published)
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
            f"ltm call: the call was queued but no result came within {command.timeout:g} s "
            "(is a worker running?)",
            file=err,
        )
        return ExitCode.FAILED
    print_answer(answer, as_json=command.as_json, out=out, err=err)
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
