"""`python -m infra.storage.schema_check` (`make lint`): `alembic check` passes on a database
migrated from nothing, fails on one that drifted from `infra.storage.schema` (also in what
`infra.storage.migrations.expressions` compares), and leaves no database behind either way."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy import Column, Integer, Table

from harness.services import TestServices, own_database
from infra.storage import schema_check
from infra.storage.database import database_name, migrate
from infra.storage.schema import metadata


@pytest.fixture
def migrated(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The URLs of the databases the check migrates, recorded as it makes them."""
    made: list[str] = []

    def recording_migrate(url: str) -> bool:
        made.append(url)
        return migrate(url)

    monkeypatch.setattr(schema_check, "migrate", recording_migrate)
    return made


@pytest.fixture
def undeclared_table() -> Iterator[str]:
    """A table the metadata declares and no migration creates, for as long as the test runs."""
    table = Table("schema_check_probe", metadata, Column("probe_id", Integer, primary_key=True))
    try:
        yield table.name
    finally:
        metadata.remove(table)


def _exists(services: TestServices, url: str) -> bool:
    with psycopg.connect(services.database_url) as connection:
        found = connection.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", (database_name(url),)
        ).fetchone()
    return found is not None


def test_a_database_migrated_from_nothing_matches_the_schema(
    services: TestServices,
    monkeypatch: pytest.MonkeyPatch,
    migrated: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("LTM_DATABASE_URL", services.database_url)
    assert schema_check.main() == 0
    assert capsys.readouterr().err == ""
    [url] = migrated
    assert not _exists(services, url)


def test_a_column_added_by_hand_is_drift(services: TestServices) -> None:
    with own_database(services, "drift") as url:
        assert schema_check.schema_drift(url) is None
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute("ALTER TABLE outbox ADD COLUMN added_by_hand text")
        drift = schema_check.schema_drift(url)
    assert drift is not None
    assert "remove_column" in drift
    assert "added_by_hand" in drift


def test_a_default_changed_by_hand_is_drift(services: TestServices) -> None:
    with own_database(services, "drift_default") as url:
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute("ALTER TABLE users ALTER COLUMN privacy_level SET DEFAULT 2")
        drift = schema_check.schema_drift(url)
    assert drift is not None
    assert "modify_default" in drift
    assert "privacy_level" in drift


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (
            "ALTER TABLE users DROP CONSTRAINT users_privacy_level_check,"
            " ADD CONSTRAINT users_privacy_level_check CHECK (privacy_level BETWEEN 0 AND 3)",
            "users_privacy_level_check",
        ),
        (
            "DROP INDEX outbox_unpublished_idx;"
            " CREATE INDEX outbox_unpublished_idx ON outbox (outbox_id) WHERE ttl_ms IS NULL",
            "outbox_unpublished_idx",
        ),
    ],
    ids=["check expression", "index predicate"],
)
def test_an_expression_alembic_leaves_uncompared_is_compared(
    services: TestServices, change: str, named: str
) -> None:
    with own_database(services, "drift_expression") as url:
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute(change)
        drift = schema_check.schema_drift(url)
    assert drift is not None
    assert named in drift


def test_the_command_fails_with_alembics_message_and_drops_its_database(
    services: TestServices,
    monkeypatch: pytest.MonkeyPatch,
    migrated: list[str],
    undeclared_table: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("LTM_DATABASE_URL", services.database_url)
    assert schema_check.main() == 1
    err = capsys.readouterr().err
    assert "the migrations and infra/storage/schema.py disagree" in err
    assert "New upgrade operations detected" in err
    assert undeclared_table in err
    [url] = migrated
    assert not _exists(services, url)


def test_the_database_is_dropped_when_the_check_itself_fails(
    services: TestServices, monkeypatch: pytest.MonkeyPatch, migrated: list[str]
) -> None:
    def failing_check(url: str) -> str | None:
        raise RuntimeError("the check broke")

    monkeypatch.setattr(schema_check, "schema_drift", failing_check)
    with pytest.raises(RuntimeError, match="the check broke"):
        schema_check.check_migrations(services.database_url)
    [url] = migrated
    assert not _exists(services, url)


def test_two_checks_at_once_pass_on_databases_of_their_own(services: TestServices) -> None:
    # Processes, as two `make lint` are: Alembic's migration context is one per process.
    env = {**os.environ, "LTM_DATABASE_URL": services.database_url}
    checks = [
        subprocess.Popen(
            [sys.executable, "-m", "infra.storage.schema_check"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outcomes = [(check.communicate(timeout=90)[1], check.returncode) for check in checks]
    assert outcomes == [("", 0), ("", 0)]
