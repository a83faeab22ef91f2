"""`ltm broker-definitions`: passwords required and never shown; users and vhost from settings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ltm.main import main

PASSWORDS = {
    "LTM_BROKER_WORKER_PASSWORD": "worker-pw-1",
    "LTM_BROKER_BOT_PASSWORD": "bot-pw-2",
    "LTM_BROKER_OPERATOR_PASSWORD": "operator-pw-3",
}


@pytest.fixture
def passwords(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable, value in PASSWORDS.items():
        monkeypatch.setenv(variable, value)


@pytest.mark.usefixtures("passwords")
def test_the_document_names_the_users_and_shows_no_password(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LTM_BROKER_BOT_USER", "shards")
    monkeypatch.setenv("LTM_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/prod")
    assert main(["broker-definitions"]) == 0
    out = capsys.readouterr().out
    document = json.loads(out)
    assert [user["name"] for user in document["users"]] == ["ltm-worker", "shards", "ltm-operator"]
    assert document["vhosts"] == [{"name": "prod"}]
    for password in PASSWORDS.values():
        assert password not in out


@pytest.mark.usefixtures("passwords")
def test_the_vhost_is_given_or_slash(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LTM_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
    assert main(["broker-definitions"]) == 0
    assert json.loads(capsys.readouterr().out)["vhosts"] == [{"name": "/"}]
    assert main(["broker-definitions", "--vhost", "other"]) == 0
    assert json.loads(capsys.readouterr().out)["vhosts"] == [{"name": "other"}]


def test_a_missing_password_is_exit_2_naming_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("LTM_BROKER_WORKER_PASSWORD", "x")
    secret = tmp_path / "bot"
    secret.write_text("from-a-file\n")
    monkeypatch.setenv("LTM_BROKER_BOT_PASSWORD_FILE", str(secret))
    monkeypatch.delenv("LTM_BROKER_OPERATOR_PASSWORD", raising=False)
    assert main(["broker-definitions"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "LTM_BROKER_OPERATOR_PASSWORD" in captured.err
    assert "LTM_BROKER_BOT_PASSWORD" not in captured.err


@pytest.mark.usefixtures("passwords")
def test_two_roles_sharing_a_user_is_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LTM_BROKER_BOT_USER", "ltm-worker")
    assert main(["broker-definitions"]) == 2
    assert "a user of its own" in capsys.readouterr().err
