"""Database URLs over several hosts (libpq's failover) through SQLAlchemy and our helpers."""

from __future__ import annotations

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from infra.settings import to_sqlalchemy_url
from infra.storage.database import database_name, with_database_name

TWO_HOSTS = "postgresql://w:pw@db1:5432,db2:5433/ltm?target_session_attrs=read-write"


def test_one_host_is_only_given_the_psycopg_dialect() -> None:
    assert to_sqlalchemy_url("postgresql://w:pw@db1:5432/ltm") == (
        "postgresql+psycopg://w:pw@db1:5432/ltm"
    )


def test_several_hosts_become_sqlalchemys_host_parameters() -> None:
    assert to_sqlalchemy_url(TWO_HOSTS) == (
        "postgresql+psycopg://w:pw@/ltm?host=db1:5432&host=db2:5433&target_session_attrs=read-write"
    )


@pytest.mark.parametrize(
    ("url", "hosts", "ports"),
    [
        (TWO_HOSTS, "db1,db2", "5432,5433"),
        ("postgresql://db1,db2/ltm", "db1,db2", ","),
    ],
)
def test_psycopg_is_given_every_host_and_port(url: str, hosts: str, ports: str) -> None:
    engine = create_async_engine(to_sqlalchemy_url(url))
    _, arguments = engine.dialect.create_connect_args(engine.url)
    assert (arguments["host"], arguments["port"], arguments["dbname"]) == (hosts, ports, "ltm")
    if "target_session_attrs" in url:
        assert arguments["target_session_attrs"] == "read-write"


def test_another_database_on_the_same_servers_keeps_every_host() -> None:
    other = with_database_name(TWO_HOSTS, "ltm_test")
    assert other == ("postgresql://w:pw@db1:5432,db2:5433/ltm_test?target_session_attrs=read-write")
    assert database_name(other) == "ltm_test"


def test_one_port_for_several_hosts_serves_each() -> None:
    assert with_database_name("postgresql://w@db1,db2:6000/ltm", "x") == (
        "postgresql://w@db1:5432,db2:6000/x"
    )
