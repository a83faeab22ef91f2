"""A revision keeps why an operator made it.

`reason` is the justification an operator gave for a revert (`ltm memory revert --reason`,
the console's "Revert these"); null for every other revision: the worker's tools and a single
restore give none. The append-only trigger keeps it as written: an erasure's redaction
changes the contents and the actor only.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

# Nullable without a default: PostgreSQL adds it without rewriting the table (the append-only
# trigger fires on UPDATE and DELETE of rows, not on ALTER TABLE).
UPGRADE = r"""
ALTER TABLE memory_revisions ADD COLUMN reason text NULL;

-- The trigger of 0008, with the new column kept as written.
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
       AND NEW.reason IS NOT DISTINCT FROM OLD.reason
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

DOWNGRADE = r"""
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
ALTER TABLE memory_revisions DROP COLUMN reason;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
