"""`ltm call FILE`: the call file, read here, so that the command gets its bytes."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ltm.arguments.common import add_command, on_parsed
from worker.ops.commands import CallTool

__all__ = ["add_call"]


def add_call(commands: Any) -> None:
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
    on_parsed(call, lambda args: _call_tool(args, call))


def _call_tool(args: argparse.Namespace, parser: argparse.ArgumentParser) -> CallTool:
    body = _read_call(args, parser)
    return CallTool(body=body, timeout=float(args.timeout), as_json=bool(args.json))


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
