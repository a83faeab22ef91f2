"""The chaos run's reading of the worker logs."""

from __future__ import annotations

import json
from pathlib import Path

from bench.chaos import unexpected_log_lines


def _line(level: str, event: str) -> str:
    return json.dumps({"event": event, "level": level, "timestamp": "2026-12-03T16:03:34Z"})


def test_errors_the_faults_explain_are_not_reported(tmp_path: Path) -> None:
    log = tmp_path / "worker0-1.log"
    log.write_text(
        "\n".join(
            [
                _line("info", "consuming"),
                _line("warning", "broker connection lost; reconnecting"),
                _line("error", 'Unexpected connection close from remote "amqp://..."'),
                _line("error", "database unavailable past the retry budget"),
            ]
        )
        + "\n"
    )
    assert unexpected_log_lines([log]) == []


def test_other_errors_and_lines_that_are_not_json_are_reported(tmp_path: Path) -> None:
    one = tmp_path / "worker0-1.log"
    one.write_text(_line("error", "Task exception was never retrieved") + "\n")
    two = tmp_path / "worker1-1.log"
    two.write_text(
        _line("critical", "worker crashed") + "\nTraceback (most recent call last):\n" + "[1]\n"
    )
    assert unexpected_log_lines([two, one]) == [
        "worker0-1.log: Task exception was never retrieved",
        "worker1-1.log: worker crashed",
        "worker1-1.log: Traceback (most recent call last):",
        "worker1-1.log: [1]",
    ]
