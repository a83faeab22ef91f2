"""`ltm migrate` says whether it created the database or found it."""

from __future__ import annotations

import pytest

from harness.services import TestServices
from infra.storage.database import drop_database, with_database_name
from ltm.main import main


def test_migrate_says_whether_it_created_the_database(
    services: TestServices, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    name = f"ltm_test_{services.run_id}_migrate"
    url = with_database_name(services.database_url, name)
    monkeypatch.setenv("LTM_DATABASE_URL", url)
    try:
        assert main(["migrate"]) == 0
        first = capsys.readouterr().out
        assert main(["migrate"]) == 0
        second = capsys.readouterr().out
    finally:
        drop_database(url)
    assert first.splitlines() == [f"created database {name}; its schema is up to date"]
    assert second.splitlines() == [f"database {name} exists; its schema is up to date"]
