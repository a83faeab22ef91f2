"""A revision keeps why an operator made it.

`reason` is the justification an operator gave for a revert (`ltm memory revert --reason`,
the console's "Revert these"); null for every other revision: the worker's tools and a single
restore give none.

Revision ID: 0010
Revises: 0007
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0007"
branch_labels = None
depends_on = None

# Nullable without a default: PostgreSQL adds it without rewriting the table (the append-only
# trigger fires on UPDATE and DELETE of rows, not on ALTER TABLE).
UPGRADE = r"""
ALTER TABLE memory_revisions ADD COLUMN reason text NULL;
"""

DOWNGRADE = r"""
ALTER TABLE memory_revisions DROP COLUMN reason;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
