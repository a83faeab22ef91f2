"""`infra.storage.schema` declares the tables of docs/contract.md with the columns it lists,
and the roles' table list (`infra.storage.roles.TABLES`) knows every one of them."""

from __future__ import annotations

from sqlalchemy import Table

from infra.storage.roles import TABLES
from infra.storage.schema import memory_revisions, metadata, outbox, personal_memories, servers

# Written out from the contract's table of tables, in its order.
CONTRACT_COLUMNS = {
    "servers": ["server_id", "server_disc_id"],
    "server_configs": [
        "server_id",
        "self_teaching_enabled",
        "personal_memories_enabled",
        "memory_edit_policy",
    ],
    "personas": ["persona_id", "server_id", "persona_lineage_id", "nickname"],
    "users": ["user_id", "user_disc_id", "user_nickname", "privacy_level"],
    "guild_members": [
        "server_id",
        "user_disc_id",
        "display_name",
        "global_name",
        "username",
        "is_bot",
    ],
    "personalization_blacklist": ["server_id", "user_id"],
    "server_memories": [
        "server_memory_id",
        "server_id",
        "persona_id",
        "persona_lineage_id",
        "user_id",
        "content",
        "tags",
        "created_at",
        "updated_at",
        "revision_id",
    ],
    "personal_memories": [
        "personal_memory_id",
        "user_id",
        "persona_lineage_id",
        "content",
        "tags",
        "created_at",
        "updated_at",
        "revision_id",
    ],
    "memory_revisions": [
        "revision_id",
        "scope",
        "memory_id",
        "action",
        "content_before",
        "content_after",
        "server_id",
        "owner_user_id",
        "persona_lineage_id",
        "actor_disc_id",
        "tool_call_id",
        "occurred_at",
        "reason",
        "redacted_at",
    ],
    "tool_call_inbox": [
        "tool_call_id",
        "event_id",
        "tool_name",
        "guild_id",
        "channel_id",
        "shard_id",
        "status",
        "result",
        "fingerprint",
        "received_at",
        "requested_at",
        "completed_at",
        "triggerer_id",
    ],
    "outbox": [
        "outbox_id",
        "event_id",
        "event_type",
        "routing_key",
        "correlation_id",
        "body",
        "ttl_ms",
        "created_at",
        "published_at",
        "traceparent",
    ],
    "data_requests": [
        "request_id",
        "kind",
        "subject_kind",
        "subject_id",
        "requested_by_kind",
        "requested_by_id",
        "reason",
        "received_at",
        "completed_at",
        "status",
        "receipt",
        "strict",
        "keep_learning",
        "stated_reason",
        "removed_letters",
    ],
    "posted_notices": [
        "event_id",
        "shard_id",
        "channel_id",
        "message_id",
        "memory_id",
        "scope",
        "owner_disc_id",
        "guild_id",
        "posted_at",
        "retract_error",
    ],
}


def test_every_table_of_the_contract_has_its_columns_and_no_other() -> None:
    declared = {name: sorted(table.c.keys()) for name, table in metadata.tables.items()}
    assert declared == {name: sorted(columns) for name, columns in CONTRACT_COLUMNS.items()}


def test_the_roles_decide_for_every_declared_table() -> None:
    # alembic_version is Alembic's own, not the schema's.
    assert set(metadata.tables) | {"alembic_version"} == set(TABLES)


def test_constraints_have_the_names_postgresql_gave_the_migrations_ones() -> None:
    def names(table: Table) -> set[str]:
        return {str(c.name) for c in table.constraints} | {str(i.name) for i in table.indexes}

    assert names(servers) == {"servers_pkey", "servers_server_disc_id_key"}
    assert names(personal_memories) == {
        "personal_memories_pkey",
        "personal_memories_user_id_fkey",
        "personal_memories_scope_idx",
    }
    assert names(memory_revisions) == {
        "memory_revisions_pkey",
        "memory_revisions_scope_check",
        "memory_revisions_action_check",
        "memory_revisions_memory_idx",
        "memory_revisions_tool_call_idx",
        "memory_revisions_actor_idx",
        "memory_revisions_owner_idx",
    }


def test_the_outbox_indexes_are_partial_as_the_migration_made_them() -> None:
    where = {
        str(index.name): str(index.dialect_options["postgresql"]["where"])
        for index in outbox.indexes
    }
    assert where == {
        "outbox_unpublished_idx": "outbox.published_at IS NULL",
        "outbox_published_at_idx": "outbox.published_at IS NOT NULL",
    }
