"""Logging to an output that went away drops the lines, and never raises into the caller."""

from __future__ import annotations

import io
import logging

import pytest
from pydantic import BaseModel, ValidationError

from infra.observability.logs import configure_logging, error_summary, get_logger


class BrokenPipe(io.StringIO):
    """stderr once the reader of its pipe has exited: every write fails with EPIPE."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        raise BrokenPipeError(32, "Broken pipe")


def test_a_broken_pipe_drops_the_lines_and_raises_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    stderr = BrokenPipe()
    monkeypatch.setattr("sys.stderr", stderr)
    configure_logging("INFO", "json")

    get_logger("test").info("stopping", tool_call_id="c-1")
    get_logger("test").warning("and after", tool_call_id="c-1")
    logging.getLogger("a.library").warning("a library's line")

    assert stderr.writes == 1  # tried once; after that the stream counts as gone


def test_a_closed_stderr_drops_the_lines_and_raises_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stderr = io.StringIO()
    monkeypatch.setattr("sys.stderr", stderr)
    configure_logging("INFO", "console")
    stderr.close()

    get_logger("test").info("stopping")
    logging.getLogger("a.library").error("a library's line")


def test_lines_reach_a_working_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    stderr = io.StringIO()
    monkeypatch.setattr("sys.stderr", stderr)
    configure_logging("INFO", "json")

    get_logger("test").info("worker.consuming", tool_call_id="c-2")
    logging.getLogger("a.library").warning("a library's line")

    lines = stderr.getvalue().splitlines()
    assert '"event":"worker.consuming"' in lines[0] and '"tool_call_id":"c-2"' in lines[0]
    assert "a library's line" in lines[1]


SECRET = "marker-4f1e-the-memory-text"


class _Diag:
    constraint_name = "server_memories_content_check"
    table_name = "server_memories"
    column_name = None


class _DatabaseError(Exception):
    """As psycopg's: a SQLSTATE, a diagnostic, and a message quoting the failing row."""

    sqlstate = "23514"
    diag = _Diag()


class _StatementError(Exception):
    """As SQLAlchemy's wrapper: the statement's parameters in its message, the driver's in
    `orig`."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(f"[parameters: {{'content': {SECRET!r}}}]")
        self.orig = original


def _validation_error() -> ValidationError:
    class Arguments(BaseModel):
        memory_id: int

    try:
        Arguments.model_validate({"memory_id": SECRET})
    except ValidationError as error:
        return error
    raise AssertionError("the model took a text for an id")


@pytest.mark.parametrize(
    ("error", "summary"),
    [
        (
            _StatementError(_DatabaseError(f"Failing row contains ({SECRET})")),
            "_StatementError(_DatabaseError(SQLSTATE 23514, constraint "
            "server_memories_content_check, table server_memories))",
        ),
        (ValueError(SECRET), "ValueError"),
        (ConnectionRefusedError(111, "Connection refused"), "ConnectionRefusedError("),
        (TimeoutError(), "TimeoutError("),
    ],
)
def test_an_error_is_summarised_without_the_data_it_was_about(
    error: BaseException, summary: str
) -> None:
    assert error_summary(error).startswith(summary)
    assert SECRET not in error_summary(error)
    assert SECRET not in error_summary(_validation_error())


@pytest.mark.parametrize("fmt", ["json", "console"])
def test_a_logged_exception_shows_its_frames_but_no_message_or_local(
    monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    stderr = io.StringIO()
    monkeypatch.setattr("sys.stderr", stderr)
    configure_logging("DEBUG", fmt)

    def failing(arguments: dict[str, str]) -> None:
        raise RuntimeError(f"could not use {arguments['memory_content']}")

    try:
        try:
            failing({"memory_content": SECRET})
        except RuntimeError as cause:
            raise KeyError(SECRET) from cause
    except KeyError as error:
        get_logger("test").exception("worker.pipeline_failed", tool_call_id="c-3")
        get_logger("test").warning("worker.retrying", error=error)
    logging.getLogger("a.library").error("a library failed", exc_info=_validation_error())

    logged = stderr.getvalue()
    assert SECRET not in logged
    assert "failing" in logged and "RuntimeError" in logged and "KeyError" in logged
    assert "worker.pipeline_failed" in logged and "c-3" in logged
