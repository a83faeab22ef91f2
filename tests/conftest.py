"""Fixtures of every test: one database and one broker virtual host per test run, and the
run's own broker nodes and PostgreSQL instances for the tests that ask for them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from harness.services import TestServices, test_services
from infra.settings import Settings
from tests.support.localnodes import (
    localnodes_tls,
    machine_services,
    postgres_pair,
    rabbit_cluster,
    tls_node,
    tls_postgres,
)

# Our own broker nodes and PostgreSQL instances, opt-in: only the tests that name them start
# anything. Defined here once, so that the session's cluster is one for every package's tests.
__all__ = [
    "localnodes_tls",
    "machine_services",
    "postgres_pair",
    "rabbit_cluster",
    "tls_node",
    "tls_postgres",
]


@pytest.fixture(scope="session")
def services() -> Iterator[TestServices]:
    with test_services() as running:
        yield running


@pytest.fixture(scope="session")
def settings(services: TestServices) -> Settings:
    return Settings(
        database_url=services.database_url,
        amqp_url=services.amqp_url,
        amqp_prefix=services.amqp_prefix,
        metrics_port=0,
        gateway_metrics_port=0,
        db_retry_seconds=3.0,
        log_format="console",
    )


@pytest.fixture(scope="session")
async def database(settings: Settings) -> AsyncIterator[str]:
    """The migrated database's URL (psycopg form)."""
    yield settings.database_url
