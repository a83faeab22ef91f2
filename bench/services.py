"""The bench's own PostgreSQL database and RabbitMQ virtual host, removed at the end.

The database is `ltm_bench_<random>` on the local server (or the server of
`LTM_DATABASE_URL`), migrated with `infra.storage.database.migrate`; the virtual host is
`ltm-bench-<random>`, made with `rabbitmqctl`, and every name in it carries the prefix
`ltmb<random>`. Both go away when the context ends, also after a failure.

The pieces the test suite already has (the services' dataclass and its child-process
environment, `rabbitmqctl`, the URL helpers) come from `harness.services`; unlike the
tests, the bench always uses the local services and always makes its own virtual host.
"""

from __future__ import annotations

import os
import urllib.parse
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

from contracts import Topology
from harness.services import (
    DEFAULT_AMQP_URL,
    DEFAULT_DATABASE_URL,
    TestServices,
    rabbitmqctl,
    with_vhost,
)
from infra.storage.database import drop_database, migrate, with_database_name

__all__ = ["BenchServices", "bench_services"]


@dataclass(frozen=True)
class BenchServices(TestServices):
    """The services of one bench run; `env()` is the environment of its child processes."""

    @property
    def topology(self) -> Topology:
        return Topology(self.amqp_prefix)

    def env(self, **extra: str) -> dict[str, str]:
        """As the tests', without the `OTEL_*` of the shell that runs the bench: each phase
        says how its processes trace (the tracing phase's default sampler is the SDK's own
        only when no `OTEL_TRACES_SAMPLER` comes from outside)."""
        env = {name: value for name, value in super().env().items() if not name.startswith("OTEL_")}
        env.update(extra)
        return env


@contextmanager
def bench_services() -> Iterator[BenchServices]:
    """Creates the database and the virtual host; drops both when the block ends."""
    run_id = uuid.uuid4().hex[:10]
    base_db = os.environ.get("LTM_DATABASE_URL", DEFAULT_DATABASE_URL)
    base_amqp = os.environ.get("LTM_AMQP_URL", DEFAULT_AMQP_URL)
    with ExitStack() as stack:
        database_url = with_database_name(base_db, f"ltm_bench_{run_id}")
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
            amqp_url=with_vhost(base_amqp, vhost),
            amqp_prefix=f"ltmb{run_id}",
            vhost=vhost,
        )
