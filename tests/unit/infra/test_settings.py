"""Settings: secrets from files (`*_FILE`), the lists and bounds of docs/security.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.settings import SECRET_SETTINGS, Settings, SettingsError

# Every secret, the variable that names its file, and how to read the value back.
SECRET_VARIABLES = {
    "database_url": "LTM_DATABASE_URL",
    "amqp_url": "LTM_AMQP_URL",
    "discord_token": "DISCORD_TOKEN",
    "llm_api_key": "LTM_LLM_API_KEY",
    "broker_worker_password": "LTM_BROKER_WORKER_PASSWORD",
    "broker_bot_password": "LTM_BROKER_BOT_PASSWORD",
    "broker_operator_password": "LTM_BROKER_OPERATOR_PASSWORD",
}


def _value(settings: Settings, name: str) -> str:
    value = getattr(settings, name)
    return value if isinstance(value, str) else value.get_secret_value()


def test_every_secret_setting_has_a_file_variable() -> None:
    assert set(SECRET_VARIABLES) == SECRET_SETTINGS


@pytest.mark.parametrize(("name", "variable"), sorted(SECRET_VARIABLES.items()))
def test_a_secret_comes_from_its_file_without_the_trailing_newline(
    name: str, variable: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(variable, raising=False)
    # A value the setting accepts (the broker's URLs are checked).
    value = f"amqp://u:value-of-{name}@h/" if name == "amqp_url" else f"value-of-{name}"
    secret = tmp_path / "secret"
    secret.write_text(f"{value}\n")
    monkeypatch.setenv(f"{variable}_FILE", str(secret))
    assert _value(Settings(), name) == value


def test_only_one_trailing_line_break_is_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"pass word \r\n")
    monkeypatch.setenv("LTM_BROKER_BOT_PASSWORD_FILE", str(secret))
    password = Settings().broker_bot_password
    assert password is not None and password.get_secret_value() == "pass word "


def test_a_variable_and_its_file_together_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "secret"
    secret.write_text("amqp://a:b@h/\n")
    monkeypatch.setenv("LTM_AMQP_URL", "amqp://c:d@h/")
    monkeypatch.setenv("LTM_AMQP_URL_FILE", str(secret))
    with pytest.raises(SettingsError, match="LTM_AMQP_URL and LTM_AMQP_URL_FILE are both set"):
        Settings()


def test_an_unreadable_file_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LTM_DATABASE_URL_FILE", str(tmp_path / "missing"))
    with pytest.raises(SettingsError, match=r"LTM_DATABASE_URL_FILE: cannot read .*missing"):
        Settings()


def test_settings_show_no_password() -> None:
    settings = Settings(
        database_url="postgresql://w:db-secret@h/ltm",
        amqp_url="amqp://w:amqp-secret@h/",
        broker_bot_password="bot-secret",
    )
    shown = repr(settings) + str(settings)
    for secret in ("db-secret", "amqp-secret", "bot-secret"):
        assert secret not in shown


@pytest.mark.parametrize(
    ("text", "trusted"),
    [
        ("ltm-bot", frozenset({"ltm-bot"})),
        (" ltm-bot , ltm-operator,,", frozenset({"ltm-bot", "ltm-operator"})),
        ("", None),
        (" , ", None),
    ],
)
def test_trusted_publishers_are_a_comma_separated_list(
    text: str, trusted: frozenset[str] | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LTM_TRUSTED_PUBLISHERS", text)
    assert Settings().trusted_publishers == trusted


def test_the_defaults_of_security(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("LTM_TRUSTED_PUBLISHERS", "LTM_METRICS_HOST", "LTM_MAX_MESSAGE_BYTES"):
        monkeypatch.delenv(variable, raising=False)
    settings = Settings()
    assert settings.trusted_publishers is None
    assert settings.metrics_host == "127.0.0.1"
    assert settings.max_message_bytes == 262_144
    assert (
        settings.broker_worker_user,
        settings.broker_bot_user,
        settings.broker_operator_user,
    ) == ("ltm-worker", "ltm-bot", "ltm-operator")
