"""The create tool: a memory's first revision is `created`.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

UPGRADE = r"""
ALTER TABLE memory_revisions DROP CONSTRAINT memory_revisions_action_check;
ALTER TABLE memory_revisions ADD CONSTRAINT memory_revisions_action_check
    CHECK (action IN ('created', 'updated', 'deleted', 'restored'));
"""

# `created` revisions cannot be removed (the table is append-only), so the old check goes
# back NOT VALID: it holds for new rows, and leaves the history as it is.
DOWNGRADE = r"""
ALTER TABLE memory_revisions DROP CONSTRAINT memory_revisions_action_check;
ALTER TABLE memory_revisions ADD CONSTRAINT memory_revisions_action_check
    CHECK (action IN ('updated', 'deleted', 'restored')) NOT VALID;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
