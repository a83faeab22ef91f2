"""The tables of docs/contract.md, the inbox and the outbox.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# Plain SQL: the schema is the contract, and reads best as the DDL it is.
UPGRADE = r"""
CREATE SEQUENCE memory_id_seq AS bigint;

CREATE TABLE servers (
    server_id serial PRIMARY KEY,
    server_disc_id text NOT NULL UNIQUE
);

CREATE TABLE server_configs (
    server_id integer PRIMARY KEY REFERENCES servers ON DELETE CASCADE,
    self_teaching_enabled boolean NOT NULL DEFAULT true,
    personal_memories_enabled boolean NOT NULL DEFAULT true
);

CREATE TABLE personas (
    persona_id serial PRIMARY KEY,
    server_id integer NOT NULL REFERENCES servers ON DELETE CASCADE,
    persona_lineage_id bigint NOT NULL,
    nickname text NOT NULL
);
CREATE INDEX personas_server_id_idx ON personas (server_id);

CREATE TABLE users (
    user_id serial PRIMARY KEY,
    user_disc_id text NOT NULL UNIQUE,
    user_nickname text NULL,
    privacy_level smallint NOT NULL DEFAULT 0 CHECK (privacy_level BETWEEN 0 AND 2)
);

CREATE TABLE guild_members (
    server_id integer NOT NULL REFERENCES servers ON DELETE CASCADE,
    user_disc_id text NOT NULL,
    display_name text NULL,
    global_name text NULL,
    username text NOT NULL,
    is_bot boolean NOT NULL DEFAULT false,
    PRIMARY KEY (server_id, user_disc_id)
);

CREATE TABLE personalization_blacklist (
    server_id integer NOT NULL REFERENCES servers ON DELETE CASCADE,
    user_id integer NOT NULL REFERENCES users ON DELETE CASCADE,
    PRIMARY KEY (server_id, user_id)
);

CREATE TABLE server_memories (
    server_memory_id bigint PRIMARY KEY DEFAULT nextval('memory_id_seq'),
    server_id integer NOT NULL REFERENCES servers ON DELETE CASCADE,
    persona_id integer NULL REFERENCES personas ON DELETE SET NULL,
    persona_lineage_id bigint NOT NULL,
    user_id integer NULL REFERENCES users ON DELETE SET NULL,
    content text NOT NULL,
    tags text[] NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX server_memories_scope_idx ON server_memories (server_id, persona_lineage_id);

CREATE TABLE personal_memories (
    personal_memory_id bigint PRIMARY KEY DEFAULT nextval('memory_id_seq'),
    user_id integer NOT NULL REFERENCES users ON DELETE CASCADE,
    persona_lineage_id bigint NOT NULL,
    content text NOT NULL,
    tags text[] NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX personal_memories_scope_idx ON personal_memories (user_id, persona_lineage_id);
ALTER SEQUENCE memory_id_seq OWNED BY server_memories.server_memory_id;

CREATE TABLE memory_revisions (
    revision_id bigserial PRIMARY KEY,
    scope text NOT NULL CHECK (scope IN ('server_wide', 'target_user')),
    memory_id bigint NOT NULL,
    action text NOT NULL CHECK (action IN ('updated', 'deleted', 'restored')),
    content_before text NOT NULL,
    content_after text NULL,
    server_id integer NULL,
    owner_user_id integer NULL,
    persona_lineage_id bigint NOT NULL,
    actor_disc_id text NOT NULL,
    tool_call_id text NOT NULL,
    occurred_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX memory_revisions_memory_idx ON memory_revisions (memory_id, revision_id);
CREATE INDEX memory_revisions_tool_call_idx ON memory_revisions (tool_call_id);

-- Append-only: history that can be rewritten is no audit trail.
CREATE FUNCTION memory_revisions_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'memory_revisions is append-only';
END $$;
CREATE TRIGGER memory_revisions_append_only
    BEFORE UPDATE OR DELETE ON memory_revisions
    FOR EACH ROW EXECUTE FUNCTION memory_revisions_append_only();

-- The idempotency record: one row per tool call, with the result it was answered.
CREATE TABLE tool_call_inbox (
    tool_call_id text PRIMARY KEY,
    event_id uuid NOT NULL,
    tool_name text NOT NULL,
    guild_id text NULL,
    channel_id text NOT NULL,
    shard_id integer NOT NULL,
    status text NULL,
    result jsonb NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    completed_at timestamptz NULL
);

-- Events written with the change, published after commit by the relay.
CREATE TABLE outbox (
    outbox_id bigserial PRIMARY KEY,
    event_id uuid NOT NULL UNIQUE,
    event_type text NOT NULL,
    routing_key text NOT NULL,
    correlation_id text NULL,
    body bytea NOT NULL,
    ttl_ms integer NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    published_at timestamptz NULL
);
CREATE INDEX outbox_unpublished_idx ON outbox (outbox_id) WHERE published_at IS NULL;
CREATE INDEX outbox_published_at_idx ON outbox (published_at) WHERE published_at IS NOT NULL;
"""

DOWNGRADE = r"""
DROP TABLE outbox;
DROP TABLE tool_call_inbox;
DROP TABLE memory_revisions;
DROP FUNCTION memory_revisions_append_only();
DROP TABLE personal_memories;
DROP TABLE server_memories;
DROP TABLE personalization_blacklist;
DROP TABLE guild_members;
DROP TABLE users;
DROP TABLE personas;
DROP TABLE server_configs;
DROP TABLE servers;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
