"""The idempotency record keeps when its call was requested.

`requested_at` is the request's `occurred_at` (the bot's clock at publish); with
`completed_at`, from now on the clock time of the answer rather than the transaction's start,
it gives what a user waited: the console's latency over the last hour. Rows written before
have none and are left out of it.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

# Nullable without a default: PostgreSQL adds it without rewriting the table. The index serves
# the console's queries of the last hour, which read by completion time.
UPGRADE = r"""
ALTER TABLE tool_call_inbox ADD COLUMN requested_at timestamptz NULL;
CREATE INDEX tool_call_inbox_completed_at_idx ON tool_call_inbox (completed_at);
"""

DOWNGRADE = r"""
DROP INDEX tool_call_inbox_completed_at_idx;
ALTER TABLE tool_call_inbox DROP COLUMN requested_at;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
