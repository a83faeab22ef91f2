"""The PostgreSQL pair of docker-compose.yml's profile `cluster`, its scripts run as the image
runs them, on instances of the test's own: `postgres-replication.sh` when the primary creates
its database, `postgres-standby.sh` as the standby's entrypoint. The standby they make is the
one the primary waits for: a commit returns once the standby has it."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.localnodes import PostgresPair
from harness.localnodes.configuration import postgres_settings
from harness.localnodes.host import chown_to_postgres, free_port, wait_until
from harness.localnodes.postgres import PostgresInstance
from harness.localnodes.running import MachineServices, started_pair

pytestmark = pytest.mark.localnodes

DOCKER = Path(__file__).resolve().parents[4] / "deploy" / "docker"
PASSWORD = "replication-secret-1"
# The image's own commands, as far as the standby's entrypoint uses them: gosu runs a command
# as a user; the image's entrypoint, for a data folder that exists, starts PostgreSQL on it
# (here: records that it was asked to).
GOSU = '#!/bin/sh\nuser=$1; shift\nexec runuser -u "$user" -- "$@"\n'
ENTRYPOINT = '#!/bin/sh\nprintf "%s\\n" "$*" > "$LTM_TEST_STARTED"\n'


@pytest.fixture(scope="module")
def primary(machine_services: MachineServices) -> Iterator[PostgresPair]:
    with started_pair(standby=False) as single:
        yield single


def _run(script: str, environment: dict[str, str]) -> None:
    result = subprocess.run(
        ["sh", str(DOCKER / script)],
        env={**os.environ, **environment},
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr


def test_the_standby_the_scripts_make_is_synchronous(primary: PostgresPair, tmp_path: Path) -> None:
    server = primary.primary
    # As the image's pg_hba.conf has it for other containers: a password, not trust, except
    # for the test's own administration.
    (server.data_dir / "pg_hba.conf").write_text(
        "local all all trust\nhost all postgres 127.0.0.1/32 trust\n"
    )
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "db-replication-password").write_text(PASSWORD + "\n")
    connection = {
        "PGHOST": "127.0.0.1",
        "PGPORT": str(server.port),
        "LTM_SECRETS_DIR": str(secrets),
    }
    _run(
        "postgres-replication.sh",
        {
            **connection,
            "POSTGRES_USER": "postgres",
            "POSTGRES_DB": "postgres",
            "PGDATA": str(server.data_dir),
        },
    )
    server.pg_ctl("reload")
    with server.connect() as admin:
        setting = admin.execute("SHOW synchronous_standby_names").fetchone()
        role = admin.execute(
            "SELECT rolreplication, rolcanlogin FROM pg_roles WHERE rolname = 'ltm_replicator'"
        ).fetchone()
    assert setting == ("FIRST 1 (ltm_standby)",)
    assert role == (True, True)

    # The standby's entrypoint, with an empty data folder: it copies the primary.
    tools = tmp_path / "bin"
    tools.mkdir()
    for name, text in (("gosu", GOSU), ("docker-entrypoint.sh", ENTRYPOINT)):
        (tools / name).write_text(text)
        (tools / name).chmod(0o755)
    started = tmp_path / "started"
    data = primary.folder / "standby"
    chown_to_postgres(primary.folder)
    _run(
        "postgres-standby.sh",
        {
            "PATH": f"{tools}:{primary.spec.bindir}:{os.environ['PATH']}",
            "PGDATA": str(data),
            "LTM_PRIMARY_HOST": "127.0.0.1",
            "LTM_PRIMARY_PORT": str(server.port),
            "LTM_SECRETS_DIR": str(secrets),
            "LTM_TEST_STARTED": str(started),
        },
    )
    assert started.read_text().strip() == "postgres"  # then handed to the image's entrypoint
    assert (data / "standby.signal").exists()
    recovery = (data / "postgresql.auto.conf").read_text()
    assert "user=ltm_replicator" in recovery and "application_name=ltm_standby" in recovery

    # Started as the image would: a hot standby, streaming as `ltm_standby` with the password.
    standby = PostgresInstance("standby", data, free_port({server.port}), primary.spec.bindir)
    standby.configure(
        postgres_settings(
            port=standby.port,
            socket_dir=primary.folder / "sockets",
            synchronous_standby=None,
            tls=False,
        )
    )
    standby.start()
    try:
        wait_until(
            lambda: _sync_state(server) == "sync",
            timeout=60,
            what="ltm_standby to stream synchronously",
        )
        with server.connect() as admin:
            admin.execute("CREATE TABLE replicated (n int)")
            admin.execute("INSERT INTO replicated VALUES (1)")
        with standby.connect() as reader:
            assert reader.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)
            # Synchronous: the commit returned once the standby had it (visible on it soon after).
            wait_until(lambda: _count(standby) == 1, timeout=30, what="the row on the standby")
    finally:
        standby.stop()


def _sync_state(server: PostgresInstance) -> str | None:
    with server.connect() as admin:
        row = admin.execute(
            "SELECT sync_state FROM pg_stat_replication WHERE application_name = 'ltm_standby'"
        ).fetchone()
    return None if row is None else str(row[0])


def _count(standby: PostgresInstance) -> int | None:
    with standby.connect() as reader:
        try:
            row = reader.execute("SELECT count(*) FROM replicated").fetchone()
        except Exception:  # not replayed yet
            return None
    return None if row is None else int(row[0])
