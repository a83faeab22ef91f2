"""Logging to an output that went away drops the lines, and never raises into the caller."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest
import structlog

from infra.observability.logs import configure_logging, get_logger


class BrokenPipe(io.StringIO):
    """stderr once the reader of its pipe has exited: every write fails with EPIPE."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        raise BrokenPipeError(32, "Broken pipe")


@pytest.fixture(autouse=True)
def logging_restored() -> Iterator[None]:
    config = structlog.get_config()
    handlers = logging.getLogger().handlers[:]
    yield
    structlog.configure(**config)
    logging.getLogger().handlers[:] = handlers


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
