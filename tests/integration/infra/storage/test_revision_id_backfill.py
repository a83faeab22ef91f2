"""Migration 0007 gives every memory row the id of its latest revision (0 when it has none),
each scope's revisions for its own table."""

from __future__ import annotations

import psycopg
from alembic import command

from harness.services import TestServices
from infra.storage.database import (
    alembic_config,
    create_database_if_missing,
    drop_database,
    with_database_name,
)

SEED = """
INSERT INTO servers (server_id, server_disc_id) VALUES (1, '111');
INSERT INTO users (user_id, user_disc_id) VALUES (1, '222');
INSERT INTO server_memories (server_memory_id, server_id, persona_lineage_id, content)
VALUES (10, 1, 7, 'changed twice'), (11, 1, 7, 'never changed');
INSERT INTO personal_memories (personal_memory_id, user_id, persona_lineage_id, content)
VALUES (20, 1, 7, 'changed once');
INSERT INTO memory_revisions
    (revision_id, scope, memory_id, action, content_before, content_after, server_id,
     owner_user_id, persona_lineage_id, actor_disc_id, tool_call_id, occurred_at)
VALUES
    (100, 'server_wide', 10, 'updated', 'a', 'b', 1, NULL, 7, '222', 'c1', now()),
    (105, 'server_wide', 10, 'updated', 'b', 'changed twice', 1, NULL, 7, '222', 'c2', now()),
    (103, 'target_user', 20, 'updated', 'x', 'changed once', 1, 1, 7, '222', 'c3', now()),
    -- Another scope's revisions of an id are not this row's.
    (200, 'target_user', 11, 'deleted', 'gone', NULL, 1, 1, 7, '222', 'c4', now());
"""


def test_each_memory_takes_its_latest_revision_of_its_own_scope(services: TestServices) -> None:
    url = with_database_name(services.database_url, f"ltm_test_{services.run_id}_backfill")
    create_database_if_missing(url)
    try:
        config = alembic_config(url)
        command.upgrade(config, "0006")
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute(SEED)
        command.upgrade(config, "0007")
        with psycopg.connect(url) as connection:
            server: dict[int, int] = dict(
                connection.execute(
                    "SELECT server_memory_id, revision_id FROM server_memories"
                ).fetchall()
            )
            personal: dict[int, int] = dict(
                connection.execute(
                    "SELECT personal_memory_id, revision_id FROM personal_memories"
                ).fetchall()
            )
        assert server == {10: 105, 11: 0}
        assert personal == {20: 103}

        command.downgrade(config, "0006")
        with psycopg.connect(url) as connection:
            columns = connection.execute(
                "SELECT table_name FROM information_schema.columns"
                " WHERE column_name = 'revision_id' AND table_name LIKE '%memories'"
            ).fetchall()
        assert columns == []
    finally:
        drop_database(url)
