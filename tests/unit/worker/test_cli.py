"""`ltm` answers an unreachable broker or database, or a missing file, with one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.processes import free_port
from worker.cli import main


def test_a_missing_file_is_one_line_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["call", "--json", str(tmp_path / "missing.json")]) == 1
    err = capsys.readouterr().err
    assert "ltm call: FileNotFoundError" in err and "missing.json" in err
    assert "Traceback" not in err


def test_a_broker_that_does_not_answer_is_one_line_and_exit_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LTM_AMQP_URL", f"amqp://guest:guest@127.0.0.1:{free_port()}/")
    assert main(["dlq", "list"]) == 1
    err = capsys.readouterr().err
    assert "ltm dlq: AMQPConnectionError" in err
    assert "Traceback" not in err


def test_a_database_that_does_not_answer_is_one_line_and_exit_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LTM_DATABASE_URL", f"postgresql://postgres@127.0.0.1:{free_port()}/x")
    assert main(["audit", "history", "1"]) == 1
    err = capsys.readouterr().err
    assert "ltm audit: OperationalError" in err
    assert "Traceback" not in err
