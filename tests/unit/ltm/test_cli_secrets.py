"""`ltm` shows no password: bad settings and unreachable services are one line each."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.processes import free_port
from ltm.main import main


def test_bad_settings_are_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LTM_AMQP_URL_FILE", str(tmp_path / "missing"))
    assert main(["dlq", "list"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ltm dlq: SettingsError: LTM_AMQP_URL_FILE: cannot read")
    assert len(err.splitlines()) == 1 and "Traceback" not in err


def test_an_unreachable_broker_shows_no_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = tmp_path / "amqp-url"
    secret.write_text(f"amqp://ltm-operator:hunter2@127.0.0.1:{free_port()}/\n")
    monkeypatch.setenv("LTM_AMQP_URL_FILE", str(secret))
    monkeypatch.delenv("LTM_AMQP_URL", raising=False)
    assert main(["dlq", "list"]) == 1
    captured = capsys.readouterr()
    assert "hunter2" not in captured.out + captured.err
    assert "ltm dlq: AMQPConnectionError" in captured.err


def test_a_database_url_naming_no_database_shows_no_password(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LTM_DATABASE_URL", f"postgresql://u:hunter2@127.0.0.1:{free_port()}")
    with pytest.raises(ValueError, match="names no database") as raised:
        main(["migrate"])
    assert "hunter2" not in str(raised.value)
