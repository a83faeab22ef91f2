"""The trace context of the call an outbox row belongs to, for its publish however late.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

# A W3C `traceparent` (55 characters), or null for rows written with tracing off. Nullable
# with no default: adding it rewrites nothing, and older rows are published as before.
UPGRADE = r"""
ALTER TABLE outbox ADD COLUMN traceparent text NULL;
"""

DOWNGRADE = r"""
ALTER TABLE outbox DROP COLUMN traceparent;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
