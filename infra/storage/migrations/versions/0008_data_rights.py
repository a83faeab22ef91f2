"""Data rights: the answered data requests, who triggered each tool call, the redaction of a
memory's history.

`data_requests` holds one row per answered export or erasure (its receipt, never a text), and
the dead letters an erasure removed, so that a rerun after a crash counts each once.
`tool_call_inbox.triggerer_id` lets an erasure find the calls a user triggered.
`memory_revisions` stays append-only except for exactly the redaction an erasure makes:
both contents to null with `redacted_at` set, and the actor to `erased`.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE TABLE data_requests (
    request_id text PRIMARY KEY,
    kind text NOT NULL CHECK (kind IN ('export', 'erase')),
    subject_kind text NOT NULL CHECK (subject_kind IN ('user', 'guild')),
    subject_id text NOT NULL,
    requested_by_kind text NOT NULL,
    requested_by_id text NOT NULL,
    reason text NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    completed_at timestamptz NULL,
    status text NOT NULL CHECK (status IN ('running', 'done', 'refused')),
    receipt jsonb NULL,
    strict boolean NOT NULL DEFAULT false,
    keep_learning boolean NOT NULL DEFAULT false,
    stated_reason text NULL,
    removed_letters text[] NOT NULL DEFAULT '{}'
);
CREATE INDEX data_requests_received_at_idx ON data_requests (received_at);

ALTER TABLE tool_call_inbox ADD COLUMN triggerer_id text NULL;
CREATE INDEX tool_call_inbox_triggerer_idx ON tool_call_inbox (triggerer_id);

ALTER TABLE memory_revisions ALTER COLUMN content_before DROP NOT NULL;
ALTER TABLE memory_revisions ADD COLUMN redacted_at timestamptz NULL;
CREATE INDEX memory_revisions_actor_idx ON memory_revisions (actor_disc_id);
CREATE INDEX memory_revisions_owner_idx ON memory_revisions (owner_user_id)
    WHERE owner_user_id IS NOT NULL;

-- Append-only, but for the redaction an erasure makes: the contents to null with
-- `redacted_at` set (once), and the actor to `erased`. Every other column stays as it was;
-- DELETE is refused as before.
CREATE OR REPLACE FUNCTION memory_revisions_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE'
       AND NEW.revision_id = OLD.revision_id
       AND NEW.scope = OLD.scope
       AND NEW.memory_id = OLD.memory_id
       AND NEW.action = OLD.action
       AND NEW.server_id IS NOT DISTINCT FROM OLD.server_id
       AND NEW.owner_user_id IS NOT DISTINCT FROM OLD.owner_user_id
       AND NEW.persona_lineage_id = OLD.persona_lineage_id
       AND NEW.tool_call_id = OLD.tool_call_id
       AND NEW.occurred_at = OLD.occurred_at
       AND (NEW.actor_disc_id = OLD.actor_disc_id OR NEW.actor_disc_id = 'erased')
       AND (
           (NEW.redacted_at IS NOT DISTINCT FROM OLD.redacted_at
            AND NEW.content_before IS NOT DISTINCT FROM OLD.content_before
            AND NEW.content_after IS NOT DISTINCT FROM OLD.content_after)
           OR (OLD.redacted_at IS NULL AND NEW.redacted_at IS NOT NULL
               AND NEW.content_before IS NULL AND NEW.content_after IS NULL)
       )
    THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'memory_revisions is append-only';
END $$;
"""

# Redacted revisions cannot get their texts back: the downgrade leaves the contents nullable.
DOWNGRADE = r"""
CREATE OR REPLACE FUNCTION memory_revisions_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'memory_revisions is append-only';
END $$;
DROP INDEX memory_revisions_owner_idx;
DROP INDEX memory_revisions_actor_idx;
ALTER TABLE memory_revisions DROP COLUMN redacted_at;
DROP INDEX tool_call_inbox_triggerer_idx;
ALTER TABLE tool_call_inbox DROP COLUMN triggerer_id;
DROP TABLE data_requests;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
