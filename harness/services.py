"""The PostgreSQL database and RabbitMQ virtual host of one test run.

Local services first (`LTM_DATABASE_URL` / `LTM_AMQP_URL`, or the defaults); testcontainers
only when those are unset, the local service does not answer, and a Docker engine does.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import urllib.parse
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from infra.storage.database import drop_database, migrate, with_database_name

__all__ = [
    "DEFAULT_AMQP_URL",
    "DEFAULT_DATABASE_URL",
    "TestServices",
    "connection_pids",
    "database_refused",
    "own_database",
    "rabbitmqctl",
    "refuse_connections",
    "test_services",
    "with_vhost",
]

DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"


@dataclass(frozen=True)
class TestServices:
    __test__ = False  # a fixture's value, not a test class

    run_id: str
    database_url: str
    amqp_url: str
    amqp_prefix: str
    vhost: str | None  # our own virtual host, when rabbitmqctl can make one

    def env(self, **extra: str) -> dict[str, str]:
        """Environment for a subprocess (`ltm worker`, `ltm gateway`) of this test run."""
        env = dict(os.environ)
        env.update(
            LTM_DATABASE_URL=self.database_url,
            LTM_AMQP_URL=self.amqp_url,
            LTM_AMQP_PREFIX=self.amqp_prefix,
            LTM_METRICS_PORT="0",
            LTM_GATEWAY_METRICS_PORT="0",
            LTM_LOG_FORMAT="json",
        )
        env.update(extra)
        return env


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def _docker_answers() -> bool:
    try:
        import docker

        docker.from_env().ping()
        return True
    except Exception:
        return False


def rabbitmqctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["rabbitmqctl", "-q", *args], capture_output=True, text=True, timeout=60, check=True
    )


def connection_pids(vhost: str, name: str) -> list[str]:
    """The broker's ids of the open connections in `vhost` that named themselves `name`."""
    listed = rabbitmqctl("list_connections", "-p", vhost, "pid", "client_properties").stdout
    return [
        pid
        for pid, _, properties in (line.partition("\t") for line in listed.splitlines())
        if pid.startswith("<") and f'"{name}"' in properties
    ]


def with_vhost(url: str, vhost: str) -> str:
    """`url` with `vhost` as its virtual host."""
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(path="/" + urllib.parse.quote(vhost, safe="")))


@contextmanager
def test_services() -> Iterator[TestServices]:
    run_id = uuid.uuid4().hex[:10]
    with ExitStack() as stack:
        base_db = os.environ.get("LTM_DATABASE_URL")
        if base_db is None:
            base_db = DEFAULT_DATABASE_URL
            if not _answers("127.0.0.1", 5432) and _docker_answers():
                from testcontainers.postgres import PostgresContainer

                container: Any = stack.enter_context(PostgresContainer("postgres:15", driver=None))
                base_db = container.get_connection_url()
        base_amqp = os.environ.get("LTM_AMQP_URL")
        use_ctl = shutil.which("rabbitmqctl") is not None
        if base_amqp is None:
            base_amqp = DEFAULT_AMQP_URL
            if not _answers("127.0.0.1", 5672) and _docker_answers():
                from testcontainers.rabbitmq import RabbitMqContainer

                rabbit: Any = stack.enter_context(RabbitMqContainer("rabbitmq:3.13"))
                params = rabbit.get_connection_params()
                base_amqp = f"amqp://guest:guest@{params.host}:{params.port}/"
                use_ctl = False

        database_url = with_database_name(base_db, f"ltm_test_{run_id}")
        migrate(database_url)
        stack.callback(drop_database, database_url)

        vhost: str | None = None
        amqp_url = base_amqp
        if use_ctl:
            vhost = f"ltm-test-{run_id}"
            user = urllib.parse.urlsplit(base_amqp).username or "guest"
            rabbitmqctl("add_vhost", vhost)
            stack.callback(rabbitmqctl, "delete_vhost", vhost)
            rabbitmqctl("set_permissions", "-p", vhost, user, ".*", ".*", ".*")
            amqp_url = with_vhost(base_amqp, vhost)
        yield TestServices(
            run_id=run_id,
            database_url=database_url,
            amqp_url=amqp_url,
            amqp_prefix=f"ltmt{run_id}",
            vhost=vhost,
        )


@contextmanager
def own_database(services: TestServices, label: str) -> Iterator[str]:
    """A migrated database beside the run's shared one, dropped after the block: for rows with
    fixed ids (the demo's), which would collide with other tests' in the shared database."""
    url = with_database_name(services.database_url, f"ltm_test_{services.run_id}_{label}")
    migrate(url)
    try:
        yield url
    finally:
        drop_database(url)


@asynccontextmanager
async def database_refused(database_url: str) -> AsyncIterator[None]:
    """`refuse_connections` while the block runs, opened again however it ends; in a thread,
    so that the caller's event loop goes on meanwhile."""
    await asyncio.to_thread(refuse_connections, database_url, refuse=True)
    try:
        yield
    finally:
        await asyncio.to_thread(refuse_connections, database_url, refuse=False)


def refuse_connections(database_url: str, *, refuse: bool) -> None:
    """Closes the database to new connections and ends the open ones (a database gone away),
    or opens it again. Only this database: others on the server are untouched."""
    info = psycopg.conninfo.conninfo_to_dict(database_url)
    name = str(info["dbname"])
    info["dbname"] = "postgres"
    with psycopg.connect(psycopg.conninfo.make_conninfo("", **info), autocommit=True) as admin:
        admin.execute(
            sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS {}").format(
                sql.Identifier(name), sql.SQL("false" if refuse else "true")
            )
        )
        if refuse:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )
