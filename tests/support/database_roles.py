"""Login roles of one test run, each a member of one of `ltm migrate --roles`'s roles only.

`ltm_worker`, `ltm_gateway` and `ltm_operator` are global to the PostgreSQL cluster and shared
with every other run (created when missing, never dropped here); their grants are per
database, so the run's own database holds its own. The login roles are the run's: named for
it, dropped afterwards.
"""

from __future__ import annotations

import urllib.parse
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg
from psycopg import sql

from infra.storage.roles import ROLES, grant_roles

__all__ = ["LoginRoles", "login_roles"]


@dataclass(frozen=True)
class LoginRoles:
    """`ltm_worker` → the URL of a login role that is a member of it alone, and so on."""

    urls: dict[str, str]
    names: dict[str, str]

    def url(self, role: str) -> str:
        return self.urls[role]


@contextmanager
def login_roles(database_url: str) -> Iterator[LoginRoles]:
    grant_roles(database_url)
    run = uuid.uuid4().hex[:8]
    names = {role: f"{role}_login_{run}" for role in ROLES}
    with psycopg.connect(database_url, autocommit=True) as admin:
        for role, login in names.items():
            admin.execute(
                sql.SQL("CREATE ROLE {} LOGIN IN ROLE {}").format(
                    sql.Identifier(login), sql.Identifier(role)
                )
            )
    try:
        yield LoginRoles(
            urls={role: _as_user(database_url, login) for role, login in names.items()},
            names=names,
        )
    finally:
        with psycopg.connect(database_url, autocommit=True) as admin:
            for login in names.values():
                # Its sessions first: a role still connected cannot be dropped.
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                    (login,),
                )
                admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(login)))


def _as_user(database_url: str, user: str) -> str:
    """The same database as `user`, without a password (the test server trusts 127.0.0.1)."""
    parts = urllib.parse.urlsplit(database_url)
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}@{host}"))
