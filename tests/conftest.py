"""Fixtures of every test: one database and one broker virtual host per test run, and the
run's own broker nodes and PostgreSQL instances for the tests that ask for them.

Under pytest-xdist (`make test` runs two processes) each process is a test run of its own;
`tests/support/scheduling.py` says how the tests are shared between them."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import structlog

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
from tests.support.scheduling import ModuleScheduling, check_node_modules

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
LOCALNODES_FIXTURES = frozenset(__all__)


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


@pytest.fixture(autouse=True)
def logging_restored() -> Iterator[None]:
    """Logging as it was before each test: a test that runs `ltm` inside the test process
    (`main([...])`) configures it for the process, with loggers cached on first use, and
    `structlog.testing.capture_logs` in a later test would then see nothing."""
    config = structlog.get_config()
    handlers = logging.getLogger().handlers[:]
    yield
    structlog.configure(**config)
    logging.getLogger().handlers[:] = handlers


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    check_node_modules(items, LOCALNODES_FIXTURES)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> ModuleScheduling | None:
    """`--dist loadscope` (what `make test` asks for) as `ModuleScheduling` shares it."""
    if config.getvalue("dist") != "loadscope":
        return None
    return ModuleScheduling(config, log, LOCALNODES_FIXTURES)
