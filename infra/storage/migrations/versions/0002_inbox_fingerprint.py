"""The idempotency record keeps a fingerprint of the call it answered.

A tool_call_id reused by a different call is then refused instead of being answered with
the record's result. Rows written before this have no fingerprint (NULL) and answer any call
with their id, as they did.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

# A nullable column without a default: PostgreSQL adds it without rewriting the table.
UPGRADE = "ALTER TABLE tool_call_inbox ADD COLUMN fingerprint text NULL;"

DOWNGRADE = "ALTER TABLE tool_call_inbox DROP COLUMN fingerprint;"


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
