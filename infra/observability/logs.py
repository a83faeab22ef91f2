"""Structured logs: one JSON object a line in production, readable lines in a terminal.

No line holds a memory's text or a tool call's arguments, at any level: an error is logged as
`error_summary` says it (its type, and for a database error its SQLSTATE and constraint, never
a statement's parameters or a row's values), and a traceback as its frames and those
summaries, never the locals of a frame or an exception's own message.
"""

from __future__ import annotations

import logging
import sys
import traceback
from collections.abc import MutableMapping
from types import TracebackType
from typing import Any, Final, TextIO, cast

import orjson
import structlog

from infra.observability.tracing import add_trace_ids
from infra.redaction import mask_passwords_in_log

__all__ = ["configure_logging", "error_summary", "get_logger", "withhold_exception_data"]

# Errors whose message says what failed without the data it failed on: the network's, the
# broker's, a timeout. Any other error's message may quote its input (a pydantic error quotes
# the value it refused; a row's values are in a constraint's DETAIL): only its type is logged.
_SAFE_MESSAGE_MODULES: Final = ("aiormq", "aio_pika", "pamqp", "asyncio", "ssl", "socket")
_SAFE_MESSAGE_TYPES: Final = (OSError, TimeoutError, ConnectionError)
_MESSAGE_LIMIT: Final = 300


def error_summary(error: BaseException) -> str:
    """What a log line may say of `error`: its type and, where that cannot hold data, why.

    A database error: its SQLSTATE and the constraint, table or column it names, never the
    statement's parameters (SQLAlchemy's wrapper prints them) nor the failing row (libpq's
    DETAIL). A connection-level database error (no SQLSTATE) says why it failed.
    """
    name = type(error).__qualname__
    original = getattr(error, "orig", None)
    if isinstance(original, BaseException):
        return f"{name}({error_summary(original)})"
    diag = getattr(error, "diag", None)
    if diag is not None:
        sqlstate = getattr(error, "sqlstate", None)
        if sqlstate is None:
            return f"{name}({_cut(str(error))!r})"
        named = [
            f"{label} {value}"
            for label, value in (
                ("constraint", getattr(diag, "constraint_name", None)),
                ("table", getattr(diag, "table_name", None)),
                ("column", getattr(diag, "column_name", None)),
            )
            if value
        ]
        return f"{name}({', '.join([f'SQLSTATE {sqlstate}', *named])})"
    if isinstance(error, _SAFE_MESSAGE_TYPES) or type(error).__module__.split(".")[0] in (
        _SAFE_MESSAGE_MODULES
    ):
        return f"{name}({_cut(str(error))!r})"
    return name


def _cut(text: str) -> str:
    return text if len(text) <= _MESSAGE_LIMIT else text[:_MESSAGE_LIMIT] + "…"


def _traceback_text(error: BaseException) -> str:
    """The frames of `error` and of its causes, each error as `error_summary` says it."""
    parts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        frames = traceback.format_tb(current.__traceback__)
        parts.insert(
            0,
            "".join(["Traceback (most recent call last):\n", *frames])
            + f"{error_summary(current)}\n",
        )
        following = current.__cause__ or (
            None if current.__suppress_context__ else current.__context__
        )
        if following is not None:
            parts.insert(0, "\n(which led to the error below)\n\n")
        current = following
    return "".join(parts)


def withhold_exception_data(
    _logger: Any, _method: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """A structlog processor: `exc_info` becomes `exception`, a traceback of frames and error
    summaries (no locals, no messages that may quote data), and an error given as a value of
    the line is its summary."""
    exc_info = event.pop("exc_info", None)
    error: BaseException | None = None
    if isinstance(exc_info, BaseException):
        error = exc_info
    elif isinstance(exc_info, tuple) and len(exc_info) == 3:
        error = cast("tuple[type, BaseException | None, TracebackType | None]", exc_info)[1]
    elif exc_info:
        error = sys.exc_info()[1]
    if error is not None:
        event["exception"] = _traceback_text(error)
    for key, value in event.items():
        if isinstance(value, BaseException):
            event[key] = error_summary(value)
    return event


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
        # The traceback is already text (`withhold_exception_data`): printed as it is, never
        # by rich, whose tracebacks show every frame's locals (a tool call's arguments).
        else structlog.dev.ConsoleRenderer(
            colors=sys.stderr.isatty(), exception_formatter=structlog.dev.plain_traceback
        )
    )
    structlog.configure(
        processors=[
            *shared,
            structlog.processors.StackInfoRenderer(),
            withhold_exception_data,
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
                withhold_exception_data,
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
