"""The bench's own PostgreSQL database and RabbitMQ virtual host, removed at the end.

The database is `ltm_bench_<random>` on the local server (or the server of
`LTM_DATABASE_URL`), migrated with `infra.database.migrate`; the virtual host is
`ltm-bench-<random>`, made with `rabbitmqctl`, and every name in it carries the prefix
`ltmb<random>`. Both go away when the context ends, also after a failure.
"""

from __future__ import annotations

import os
import subprocess
import urllib.parse
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

import psycopg

from contracts import Topology
from infra.database import drop_database, migrate

__all__ = ["BenchServices", "bench_services", "rabbitmqctl"]

DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"


@dataclass(frozen=True)
class BenchServices:
    run_id: str
    database_url: str
    amqp_url: str
    amqp_prefix: str
    vhost: str

    @property
    def topology(self) -> Topology:
        return Topology(self.amqp_prefix)

    def env(self, **extra: str) -> dict[str, str]:
        """Environment for a child process (`ltm worker`, the peer) of this bench run."""
        env = dict(os.environ)
        env.update(
            LTM_DATABASE_URL=self.database_url,
            LTM_AMQP_URL=self.amqp_url,
            LTM_AMQP_PREFIX=self.amqp_prefix,
            LTM_METRICS_PORT="0",
            LTM_LOG_FORMAT="json",
        )
        env.update(extra)
        return env


def rabbitmqctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["rabbitmqctl", "-q", *args], capture_output=True, text=True, timeout=60, check=True
    )


def _with_database(url: str, name: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(url)
    params = {k: str(v) for k, v in info.items() if k != "dbname" and v is not None}
    user = params.pop("user", "")
    password = params.pop("password", "")
    host = params.pop("host", "127.0.0.1")
    port = params.pop("port", "5432")
    auth = user + (":" + urllib.parse.quote(password) if password else "")
    query = ("?" + urllib.parse.urlencode(params)) if params else ""
    return f"postgresql://{auth}{'@' if auth else ''}{host}:{port}/{name}{query}"


def _with_vhost(url: str, vhost: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(path="/" + urllib.parse.quote(vhost, safe="")))


@contextmanager
def bench_services() -> Iterator[BenchServices]:
    """Creates the database and the virtual host; drops both when the block ends."""
    run_id = uuid.uuid4().hex[:10]
    base_db = os.environ.get("LTM_DATABASE_URL", DEFAULT_DATABASE_URL)
    base_amqp = os.environ.get("LTM_AMQP_URL", DEFAULT_AMQP_URL)
    with ExitStack() as stack:
        database_url = _with_database(base_db, f"ltm_bench_{run_id}")
        stack.callback(drop_database, database_url)
        migrate(database_url)

        vhost = f"ltm-bench-{run_id}"
        user = urllib.parse.urlsplit(base_amqp).username or "guest"
        rabbitmqctl("add_vhost", vhost)
        stack.callback(rabbitmqctl, "delete_vhost", vhost)
        rabbitmqctl("set_permissions", "-p", vhost, user, ".*", ".*", ".*")
        yield BenchServices(
            run_id=run_id,
            database_url=database_url,
            amqp_url=_with_vhost(base_amqp, vhost),
            amqp_prefix=f"ltmb{run_id}",
            vhost=vhost,
        )
