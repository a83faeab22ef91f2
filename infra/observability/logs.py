"""Structured logs: one JSON object a line in production, readable lines in a terminal."""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO, cast

import orjson
import structlog

from infra.observability.tracing import add_trace_ids
from infra.redaction import mask_passwords_in_log

__all__ = ["configure_logging", "get_logger"]


class _LogStream:
    """Writes to `stream` until a write fails, then drops every line that follows.

    A pipe whose reader is gone (`| tee` ended by the same Ctrl-C, `| head -n 1`) or a closed
    file must not turn a log line into an error: the process is stopping, draining, or busy
    with something that matters more than its output.
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.broken = False

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                self._stream.write(text)
            except (OSError, ValueError):  # EPIPE and its kin; ValueError: a closed file
                self.broken = True
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self._stream.flush()
            except (OSError, ValueError):
                self.broken = True


def _orjson_dumps(value: Any, **_: Any) -> str:
    return orjson.dumps(value, default=str).decode()


def configure_logging(level: str = "INFO", fmt: str = "auto") -> None:
    """`fmt` is `json`, `console`, or `auto` (console when stderr is a terminal).

    Lines go to stderr while it can be written; once it cannot, they are dropped. A line
    logged within a span carries its `trace_id` and `span_id` (while tracing is on).
    """
    stream = _LogStream(sys.stderr)
    use_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        add_trace_ids,
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer(serializer=_orjson_dumps)
        if use_json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            *shared,
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info if use_json else structlog.dev.set_exc_info,
            # Last before rendering: what any processor or caller put in is masked too.
            mask_passwords_in_log,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
        ),
        # WriteLogger only writes and flushes: the stream above is file enough for it.
        logger_factory=structlog.WriteLoggerFactory(file=cast(TextIO, stream)),
        cache_logger_on_first_use=True,
    )
    # Libraries log through the standard library: route them to the same stream and format.
    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                mask_passwords_in_log,
                renderer,
            ],
            foreign_pre_chain=shared,
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    logger: structlog.stdlib.BoundLogger = structlog.get_logger(name)
    return logger
