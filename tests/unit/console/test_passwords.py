"""`ltm console hash-password`, and a console that will not start without a usable hash."""

from __future__ import annotations

import io

import pytest
from pydantic import SecretStr

from console.app import ConsoleNotConfigured, password_hash_of
from console.passwords import hash_password, print_password_hash, verify_password
from infra.settings import Settings
from ltm.main import main


async def test_the_printed_hash_checks_the_password_and_no_other() -> None:
    out, err = io.StringIO(), io.StringIO()

    code = print_password_hash(io.StringIO("correct horse battery\n"), out, err)

    printed = out.getvalue().strip()
    assert code == 0
    assert printed.startswith("$argon2id$")
    assert "correct horse" not in printed
    assert await verify_password(printed, "correct horse battery")
    assert not await verify_password(printed, "correct horse batter")
    assert not await verify_password("not a hash", "correct horse battery")


def test_a_short_password_is_refused_and_nothing_printed() -> None:
    out, err = io.StringIO(), io.StringIO()

    assert print_password_hash(io.StringIO("short\n"), out, err) == 2
    assert out.getvalue() == ""
    assert "at least 12 characters" in err.getvalue()


def test_the_console_needs_a_password_hash_that_is_one() -> None:
    with pytest.raises(ConsoleNotConfigured, match="ltm console hash-password"):
        password_hash_of(Settings(console_password_hash=None))
    with pytest.raises(ConsoleNotConfigured, match="not an Argon2 hash"):
        password_hash_of(Settings(console_password_hash=SecretStr("hunter2")))
    good = hash_password("correct horse battery")
    assert password_hash_of(Settings(console_password_hash=SecretStr(good + "\n"))) == good


def test_ltm_console_without_a_hash_says_what_to_do_and_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("ltm.main.configure_logging", lambda *_: None)
    monkeypatch.delenv("LTM_CONSOLE_PASSWORD_HASH", raising=False)

    code = main(["console", "--port", "0"])

    assert code == 2
    assert "LTM_CONSOLE_PASSWORD_HASH is not set" in capsys.readouterr().err
