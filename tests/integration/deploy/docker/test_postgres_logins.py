"""`deploy/docker/postgres-logins.sh`, as the postgres image runs it when it creates its
database, on a PostgreSQL instance of the test's own (roles are global to a cluster: the
machine's is never given these): a login role per part, each in its part's role only, with
its password; `ltm migrate --roles` then grants the roles."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from harness.localnodes import PostgresPair
from harness.localnodes.running import MachineServices, started_pair
from ltm.main import main

pytestmark = pytest.mark.localnodes

SCRIPT = Path(__file__).resolve().parents[4] / "deploy" / "docker" / "postgres-logins.sh"
PARTS = ("worker", "gateway", "operator")


@pytest.fixture(scope="module")
def instance(machine_services: MachineServices) -> Iterator[PostgresPair]:
    with started_pair(standby=False) as single:
        yield single


def test_each_part_gets_a_login_role_in_its_role_only(
    instance: PostgresPair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for part in PARTS:
        (tmp_path / f"db-{part}-password").write_text(f"pw-of-{part}-'quoted'\n")
    env = {
        **os.environ,
        "POSTGRES_USER": "postgres",
        "POSTGRES_DB": "postgres",
        "PGHOST": "127.0.0.1",
        "PGPORT": str(instance.primary.port),
        "LTM_SECRETS_DIR": str(tmp_path),
    }
    subprocess.run(["sh", str(SCRIPT)], env=env, check=True, capture_output=True, timeout=60)

    with instance.primary.connect() as connection:
        rows = connection.execute(
            """
            SELECT login.rolname, login.rolcanlogin, login.rolpassword LIKE 'SCRAM-SHA-256$%%',
                   array_agg(part.rolname ORDER BY part.rolname)
            FROM pg_authid AS login
            JOIN pg_auth_members AS m ON m.member = login.oid
            JOIN pg_roles AS part ON part.oid = m.roleid
            WHERE login.rolname LIKE 'ltm\\_%%\\_login'
            GROUP BY login.rolname, login.rolcanlogin, login.rolpassword
            ORDER BY login.rolname
            """
        ).fetchall()
    assert rows == [(f"ltm_{part}_login", True, True, [f"ltm_{part}"]) for part in sorted(PARTS)]

    # The roles the script made are the ones `ltm migrate --roles` grants.
    monkeypatch.setenv(
        "LTM_DATABASE_URL", f"postgresql://postgres@127.0.0.1:{instance.primary.port}/ltm"
    )
    assert main(["migrate", "--roles"]) == 0
    with psycopg.connect(
        f"host=127.0.0.1 port={instance.primary.port} dbname=ltm user=ltm_gateway_login"
    ) as gateway:
        gateway.execute("SELECT count(*) FROM server_memories")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            gateway.execute("DELETE FROM server_memories")
