"""Each memory row keeps the id of its latest revision.

`revision_id` is what a reader shows with a memory and what an update built on what the LLM
was shown is compared with (`context.seen`). On the row itself, not looked up in
`memory_revisions`: the statement that writes the row re-reads the row it waited for, but a
subquery on another table would keep the statement's older snapshot, and two updates built
on the same revision could both pass. 0 for a memory without revisions (seeded or imported);
the rows that have some take their latest here.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

# A constant default: PostgreSQL adds the columns without rewriting the tables; the backfill
# then touches only the memories that have revisions.
UPGRADE = r"""
ALTER TABLE server_memories ADD COLUMN revision_id bigint NOT NULL DEFAULT 0;
ALTER TABLE personal_memories ADD COLUMN revision_id bigint NOT NULL DEFAULT 0;

UPDATE server_memories AS m SET revision_id = r.revision_id
FROM (
    SELECT memory_id, max(revision_id) AS revision_id FROM memory_revisions
    WHERE scope = 'server_wide' GROUP BY memory_id
) AS r
WHERE m.server_memory_id = r.memory_id;

UPDATE personal_memories AS m SET revision_id = r.revision_id
FROM (
    SELECT memory_id, max(revision_id) AS revision_id FROM memory_revisions
    WHERE scope = 'target_user' GROUP BY memory_id
) AS r
WHERE m.personal_memory_id = r.memory_id;
"""

DOWNGRADE = r"""
ALTER TABLE personal_memories DROP COLUMN revision_id;
ALTER TABLE server_memories DROP COLUMN revision_id;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
