"""The notices a gateway posted in Discord, so that an erasure can take them back.

One row per `embed.requested` a gateway posted (its `event_id`), with the channel and message
Discord gave it and the memory it was about. An erasure of that memory's subject asks the
shard's gateway to delete the message (`notice.retract`); the gateway then deletes the row,
or keeps it with `retract_error` when Discord refused (`forbidden`).

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

# The indexes serve an erasure's look-ups (the notices of these memories, of this guild) and
# the gateway's retraction, which names the message.
UPGRADE = r"""
CREATE TABLE posted_notices (
    event_id uuid PRIMARY KEY,
    shard_id integer NOT NULL,
    channel_id text NOT NULL,
    message_id text NOT NULL,
    memory_id bigint NOT NULL,
    scope text NOT NULL,
    owner_disc_id text NULL,
    guild_id text NULL,
    posted_at timestamptz NOT NULL DEFAULT now(),
    retract_error text NULL
);
CREATE INDEX posted_notices_memory_idx ON posted_notices (memory_id);
CREATE INDEX posted_notices_guild_idx ON posted_notices (guild_id);
CREATE INDEX posted_notices_message_idx ON posted_notices (channel_id, message_id);
"""

DOWNGRADE = r"""
DROP TABLE posted_notices;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
