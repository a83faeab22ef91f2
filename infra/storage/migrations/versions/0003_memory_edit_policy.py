"""Who may change whose memory: a per-server edit policy.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

# `anyone` keeps every existing server as it was; `teacher_or_manager` lets only the teacher
# of a server memory, the owner of a personal one, or a manager of the server change it.
UPGRADE = r"""
ALTER TABLE server_configs
    ADD COLUMN memory_edit_policy text NOT NULL DEFAULT 'anyone'
    CONSTRAINT server_configs_memory_edit_policy_check
        CHECK (memory_edit_policy IN ('anyone', 'teacher_or_manager'));
"""

DOWNGRADE = r"""
ALTER TABLE server_configs DROP COLUMN memory_edit_policy;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
