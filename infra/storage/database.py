"""Creating the database and bringing its schema up to date (`ltm migrate`)."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

import psycopg
from alembic import command
from alembic.config import Config
from psycopg import sql

from infra.redaction import mask_passwords
from infra.settings import to_sqlalchemy_url

__all__ = [
    "alembic_config",
    "create_database_if_missing",
    "database_name",
    "drop_database",
    "migrate",
    "with_database_name",
]

MIGRATIONS = Path(__file__).with_name("migrations")


def _split(url: str) -> tuple[str, str]:
    """The database name, and a URL of the same server's `postgres` database."""
    info = psycopg.conninfo.conninfo_to_dict(url)
    name = str(info.get("dbname") or "")
    if not name:
        raise ValueError(f"the database URL names no database: {mask_passwords(url)!r}")
    info["dbname"] = "postgres"
    return name, psycopg.conninfo.make_conninfo("", **info)


def database_name(url: str) -> str:
    """The name of the database `url` points at."""
    return _split(url)[0]


def with_database_name(url: str, name: str) -> str:
    """The URL of database `name` on the server of `url`, as a `postgresql://` URL."""
    info = psycopg.conninfo.conninfo_to_dict(url)
    params = {k: str(v) for k, v in info.items() if k != "dbname" and v is not None}
    user = params.pop("user", "")
    password = params.pop("password", "")
    hosts = params.pop("host", "127.0.0.1").split(",")
    ports = params.pop("port", "5432").split(",")
    if len(ports) == 1:
        ports *= len(hosts)  # libpq: one port serves every host
    # Every host of a failover URL (`h1:p1,h2:p2`) stays, with its own port.
    servers = ",".join(f"{host}:{port or 5432}" for host, port in zip(hosts, ports, strict=True))
    auth = user + (":" + urllib.parse.quote(password) if password else "")
    query = ("?" + urllib.parse.urlencode(params)) if params else ""
    return f"postgresql://{auth}{'@' if auth else ''}{servers}/{name}{query}"


def create_database_if_missing(url: str) -> bool:
    """True when it created the database. Needs the role to be allowed to create one."""
    name, admin_url = _split(url)
    with psycopg.connect(admin_url, autocommit=True) as connection:
        exists = connection.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", (name,)
        ).fetchone()
        if exists:
            return False
        try:
            connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        except psycopg.errors.DuplicateDatabase:
            return False  # created meanwhile by another migrate
        return True


def drop_database(url: str) -> None:
    name, admin_url = _split(url)
    with psycopg.connect(admin_url, autocommit=True) as connection:
        connection.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def alembic_config(url: str) -> Config:
    """Alembic's configuration for the database of `url`, built here rather than read from an
    alembic.ini: `migrate` and the schema check (`infra.storage.schema_check`) share it."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", to_sqlalchemy_url(url).replace("%", "%%"))
    return config


def migrate(url: str) -> bool:
    """Creates the database when missing, then upgrades it to the newest revision.

    True when it created the database.
    """
    created = create_database_if_missing(url)
    command.upgrade(alembic_config(url), "head")
    return created
