"""`ltm audit tail --from first|last|TIME [--follow] [--json]`: the audit stream, printed.

Without `--follow` it ends once it has printed what the stream held when it began
(`operators.audit_reading` says how it knows). A lost broker connection ends the tail,
with or without `--follow`, with exit code 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TextIO

from aio_pika.exceptions import ChannelNotFoundEntity

from infra.settings import Settings
from operators.audit_reading import IDLE_S, read_audit
from operators.audit_stream import AuditDelivery, StreamStart, stream_offset
from worker.ops.audit_lines import TAIL_HEADER, compact_json_line, event_line, unreadable_line
from worker.ops.commands import TailAudit
from worker.ops.output import ExitCode, shown_time

__all__ = ["tail_audit"]


async def tail_audit(
    settings: Settings,
    command: TailAudit,
    *,
    out: TextIO | None = None,
    err: TextIO | None = None,
    stop: asyncio.Event | None = None,
    idle_s: float = IDLE_S,
) -> int:
    """Prints the audit stream from the command's start; with `follow`, until SIGINT/SIGTERM
    (or `stop` when given).

    Exit code 0; 1 when the stream does not exist or the broker connection is lost.
    """
    out, err = out or sys.stdout, err or sys.stderr
    # A caller's own event (tests, an embedding process) replaces the signal handlers.
    on_signals = stop is None
    stop = stop or asyncio.Event()
    printer = _TailPrinter(command.start, command.as_json, out, err)
    stream = settings.topology.audit_stream
    try:
        with _stop_on_signals(stop, enabled=on_signals):
            broken = await read_audit(
                settings,
                command.start,
                printer.print,
                follow=command.follow,
                stop=stop,
                idle_s=idle_s,
            )
    except ChannelNotFoundEntity:
        print(f"{stream} does not exist: run `ltm topology` first", file=err)
        return ExitCode.FAILED
    if broken:
        print("the broker connection was lost; the tail ended early", file=err)
        return ExitCode.FAILED
    if not command.follow:
        printer.say_if_empty(stream)
    return ExitCode.OK


@dataclass(slots=True)
class _TailPrinter:
    origin: StreamStart
    as_json: bool
    out: TextIO
    err: TextIO
    printed: int = 0

    def print(self, delivery: AuditDelivery) -> None:
        if self.as_json:
            line = compact_json_line(delivery.message.body)
            if line is None:
                offset = stream_offset(delivery.message)
                print(f"offset {offset}: not JSON, skipped ({delivery.problem})", file=self.err)
                return
        else:
            if not self.printed:
                print(TAIL_HEADER, file=self.out)
            line = (
                unreadable_line(delivery) if delivery.event is None else event_line(delivery.event)
            )
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
