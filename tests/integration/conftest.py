"""Our own broker nodes and PostgreSQL instances, for every integration test that names them:
defined once here, so that the session's cluster is one, whichever package's tests use it."""

from __future__ import annotations

import pytest

from tests.support.localnodes import (
    localnodes_tls,
    machine_services,
    postgres_pair,
    rabbit_cluster,
    tls_node,
    tls_postgres,
)

__all__ = [
    "localnodes_tls",
    "machine_services",
    "postgres_pair",
    "rabbit_cluster",
    "tls_node",
    "tls_postgres",
]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "localnodes: starts broker nodes or PostgreSQL instances of its own"
        " (a session's cluster takes ~20 s); deselect with -m 'not localnodes'",
    )
