"""The database roles of each part (`ltm migrate --roles`): `ltm_worker`, `ltm_gateway` and
`ltm_operator`, without login, each granted only what its code uses (docs/security.md).

A deployment grants them to its login roles (`GRANT ltm_worker TO worker_login`). Roles are
global to a PostgreSQL cluster: they are created when missing, safely when two migrations do
it at once. Grants are per database: each run revokes what these roles held here and grants
`GRANTS` again, so that the privileges are exactly these whatever an earlier version granted.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Final

import psycopg
from psycopg import sql

__all__ = ["GRANTS", "ROLES", "SEQUENCE_GRANTS", "TABLES", "grant_roles"]

WORKER: Final = "ltm_worker"
GATEWAY: Final = "ltm_gateway"
OPERATOR: Final = "ltm_operator"
ROLES: Final = (WORKER, GATEWAY, OPERATOR)

# Every table of the schema; a test fails when a migration adds one that is not here, so
# that each new table gets a decision for each role.
TABLES: Final = (
    "alembic_version",
    "data_requests",
    "guild_members",
    "memory_revisions",
    "outbox",
    "personal_memories",
    "personalization_blacklist",
    "personas",
    "posted_notices",
    "server_configs",
    "server_memories",
    "servers",
    "tool_call_inbox",
    "users",
)

_READ: Final = ("SELECT",)

# role -> table -> privileges; a column list in parentheses narrows a privilege to them.
GRANTS: Final[Mapping[str, Mapping[str, tuple[str, ...]]]] = {
    WORKER: {
        # The facts of a call.
        "servers": ("SELECT", "UPDATE (server_id)"),
        "personas": _READ,
        # The facts of a call, and what an erasure forgets of a user or a server.
        "server_configs": ("SELECT", "DELETE"),
        "users": ("SELECT", "UPDATE (user_id, user_nickname, privacy_level)", "DELETE"),
        "guild_members": ("SELECT", "DELETE"),
        "personalization_blacklist": ("SELECT", "DELETE"),
        # Its writes: memories (create, update, delete), their history (appended to, and
        # redacted by an erasure: the trigger allows nothing else), its bookkeeping.
        "server_memories": ("SELECT", "INSERT", "UPDATE", "DELETE"),
        "personal_memories": ("SELECT", "INSERT", "UPDATE", "DELETE"),
        "memory_revisions": (
            "SELECT",
            "INSERT",
            "UPDATE (content_before, content_after, redacted_at, actor_disc_id)",
        ),
        "tool_call_inbox": ("SELECT", "INSERT", "UPDATE"),
        "outbox": ("SELECT", "INSERT", "UPDATE", "DELETE"),
        "data_requests": ("SELECT", "INSERT", "UPDATE"),
        # The notices an erasure asks the gateways to retract.
        "posted_notices": _READ,
    },
    GATEWAY: {
        # The member directory, and the servers row it needs.
        "guild_members": ("SELECT", "INSERT", "UPDATE", "DELETE"),
        "servers": ("SELECT", "INSERT"),
        # The memory reader.
        "personas": _READ,
        "users": _READ,
        "server_memories": _READ,
        "personal_memories": _READ,
        # The notices it posted, recorded, and deleted once retracted (SELECT: the key in
        # the WHERE of its UPDATE and DELETE).
        "posted_notices": ("SELECT", "INSERT", "UPDATE", "DELETE"),
    },
    OPERATOR: {
        # Reads everything (`ltm audit history`, `ltm memory list`, …) …
        **{table: _READ for table in TABLES},
        # … and writes what a restore writes, with its events.
        "server_memories": ("SELECT", "INSERT", "UPDATE", "DELETE"),
        "personal_memories": ("SELECT", "INSERT", "UPDATE", "DELETE"),
        "memory_revisions": ("SELECT", "INSERT"),
        "outbox": ("SELECT", "INSERT", "UPDATE"),
    },
}
# Locking a row (`FOR NO KEY UPDATE`, how the create tool serializes a scope) needs UPDATE on
# one of its columns: the worker has it on the key alone, which foreign keys keep fixed.

# role -> sequences it takes ids from (USAGE: nextval, and a serial column's default).
SEQUENCE_GRANTS: Final[Mapping[str, tuple[str, ...]]] = {
    WORKER: ("memory_id_seq", "memory_revisions_revision_id_seq", "outbox_outbox_id_seq"),
    GATEWAY: ("servers_server_id_seq",),
    OPERATOR: ("memory_revisions_revision_id_seq", "outbox_outbox_id_seq"),
}

# Two `ltm migrate --roles` on one database take turns: GRANT and REVOKE on the same object
# at once fail with "tuple concurrently updated".
_LOCK_KEY: Final = 0x6C746D_726F6C  # "ltm" "rol"


def _create_role(role: str) -> sql.Composed:
    # Another migration may create it between the check and the CREATE: either error means
    # it exists now.
    return sql.SQL(
        """
        DO $$
        BEGIN
            IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = {name}) THEN
                CREATE ROLE {role} NOLOGIN;
            END IF;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;
        END
        $$
        """
    ).format(name=sql.Literal(role), role=sql.Identifier(role))


def _privilege(text: str) -> sql.Composable:
    """`UPDATE (user_id)` as SQL, the column quoted."""
    name, _, columns = text.partition(" (")
    if not columns:
        return sql.SQL(name)
    return sql.SQL("{} ({})").format(
        sql.SQL(name),
        sql.SQL(", ").join(sql.Identifier(c.strip()) for c in columns.rstrip(")").split(",")),
    )


def grant_statements() -> Iterator[sql.Composed]:
    """What one run executes in its transaction, after the roles exist."""
    yield sql.SQL("SELECT pg_advisory_xact_lock({})").format(sql.Literal(_LOCK_KEY))
    for role in ROLES:
        name = sql.Identifier(role)
        yield sql.SQL("REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {}").format(name)
        yield sql.SQL("REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM {}").format(name)
        yield sql.SQL("GRANT USAGE ON SCHEMA public TO {}").format(name)
        for table, privileges in GRANTS[role].items():
            yield sql.SQL("GRANT {} ON TABLE {} TO {}").format(
                sql.SQL(", ").join(_privilege(p) for p in privileges), sql.Identifier(table), name
            )
        for sequence in SEQUENCE_GRANTS[role]:
            yield sql.SQL("GRANT USAGE ON SEQUENCE {} TO {}").format(sql.Identifier(sequence), name)
    # Tables a later migration adds (as the role that migrates) can be read by operators
    # at once; the worker and the gateways get nothing until their grants say so.
    yield sql.SQL("ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO {}").format(
        sql.Identifier(OPERATOR)
    )


def grant_roles(url: str) -> None:
    """Creates the roles when missing and grants each exactly its privileges in the database
    of `url` (migrated already). Needs a role that may create roles and owns the tables."""
    with psycopg.connect(url, autocommit=True) as connection:
        for role in ROLES:
            connection.execute(_create_role(role))
        with connection.transaction():
            for statement in grant_statements():
                connection.execute(statement)
