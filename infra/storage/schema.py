r"""The database's tables, declared once as SQLAlchemy Core metadata, exactly as the migrations
create them.

The migrations (`infra/storage/migrations/versions/`) stay the hand-written DDL that builds the
schema; this metadata is what the code's queries are written against and what `alembic check`
(`infra.storage.schema_check`, run by `make lint`) compares the migrated database to, so that a
migration and this module cannot disagree unnoticed: tables, columns, types, nullability,
server defaults, foreign keys, unique and check constraints, indexes with their predicates
(the last two by `infra.storage.migrations.expressions`). Defaults, check expressions and
index predicates are written as PostgreSQL shows them back (`\d`), so that they compare as
equal text. Alembic does not compare sequences: `memory_id_seq` is declared, for the columns
that take their ids from it, but it, the sequences' ownership, and `memory_revisions`'
append-only trigger and its function, stay the migrations' alone.

The naming convention gives constraints PostgreSQL's own default names, which the migrations'
DDL left them with (`servers_pkey`, `servers_server_disc_id_key`, `personas_server_id_fkey`);
indexes are named as the migrations name them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    Sequence,
    SmallInteger,
    Table,
    Text,
    Uuid,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

__all__ = [
    "data_requests",
    "guild_members",
    "memory_id_seq",
    "memory_revisions",
    "metadata",
    "outbox",
    "personal_memories",
    "personalization_blacklist",
    "personas",
    "posted_notices",
    "server_configs",
    "server_memories",
    "servers",
    "tool_call_inbox",
    "users",
]

metadata: Final = MetaData(
    naming_convention={
        "pk": "%(table_name)s_pkey",
        "fk": "%(table_name)s_%(column_0_name)s_fkey",
        "uq": "%(table_name)s_%(column_0_name)s_key",
        "ck": "%(table_name)s_%(constraint_name)s_check",
    }
)

# As PostgreSQL shows them back: Alembic then compares equal strings instead of asking the
# server whether two expressions are equal.
_NOW: Final = text("now()")
_TRUE: Final = text("true")
_FALSE: Final = text("false")
_NO_TAGS: Final = text("'{}'::text[]")
# Both memory tables take their ids from one sequence, so that an id names one memory. The
# migrations made it OWNED BY server_memories.server_memory_id: Alembic takes that column for a
# serial and leaves its default out of the comparison; personal_memories' is compared.
memory_id_seq: Final = Sequence("memory_id_seq", metadata=metadata, data_type=BigInteger)


def _timestamp(name: str, *, nullable: bool = False, now: bool = False) -> Column[datetime]:
    return Column(
        name, DateTime(timezone=True), nullable=nullable, server_default=_NOW if now else None
    )


def _latest_revision() -> Column[int]:
    """A memory's latest `memory_revisions.revision_id`, 0 when it has none: set by every
    write of the row, and compared by an update with the revision the LLM was shown."""
    return Column("revision_id", BigInteger, nullable=False, server_default=text("0"))


servers: Final = Table(
    "servers",
    metadata,
    Column("server_id", Integer, primary_key=True),
    Column("server_disc_id", Text, nullable=False, unique=True),
)

server_configs: Final = Table(
    "server_configs",
    metadata,
    Column(
        "server_id",
        Integer,
        ForeignKey("servers.server_id", ondelete="CASCADE"),
        primary_key=True,
        autoincrement=False,
    ),
    Column("self_teaching_enabled", Boolean, nullable=False, server_default=_TRUE),
    Column("personal_memories_enabled", Boolean, nullable=False, server_default=_TRUE),
    Column("memory_edit_policy", Text, nullable=False, server_default=text("'anyone'::text")),
    CheckConstraint(
        "memory_edit_policy = ANY (ARRAY['anyone'::text, 'teacher_or_manager'::text])",
        name="memory_edit_policy",
    ),
)

personas: Final = Table(
    "personas",
    metadata,
    Column("persona_id", Integer, primary_key=True),
    Column(
        "server_id", Integer, ForeignKey("servers.server_id", ondelete="CASCADE"), nullable=False
    ),
    Column("persona_lineage_id", BigInteger, nullable=False),
    Column("nickname", Text, nullable=False),
    Index("personas_server_id_idx", "server_id"),
)

users: Final = Table(
    "users",
    metadata,
    Column("user_id", Integer, primary_key=True),
    Column("user_disc_id", Text, nullable=False, unique=True),
    Column("user_nickname", Text, nullable=True),
    Column("privacy_level", SmallInteger, nullable=False, server_default=text("0")),
    CheckConstraint("privacy_level >= 0 AND privacy_level <= 2", name="privacy_level"),
)

guild_members: Final = Table(
    "guild_members",
    metadata,
    Column(
        "server_id", Integer, ForeignKey("servers.server_id", ondelete="CASCADE"), nullable=False
    ),
    Column("user_disc_id", Text, nullable=False),
    Column("display_name", Text, nullable=True),
    Column("global_name", Text, nullable=True),
    Column("username", Text, nullable=False),
    Column("is_bot", Boolean, nullable=False, server_default=_FALSE),
    PrimaryKeyConstraint("server_id", "user_disc_id"),
)

personalization_blacklist: Final = Table(
    "personalization_blacklist",
    metadata,
    Column(
        "server_id", Integer, ForeignKey("servers.server_id", ondelete="CASCADE"), nullable=False
    ),
    Column("user_id", Integer, ForeignKey("users.user_id", ondelete="CASCADE"), nullable=False),
    PrimaryKeyConstraint("server_id", "user_id"),
)

server_memories: Final = Table(
    "server_memories",
    metadata,
    Column(
        "server_memory_id",
        BigInteger,
        memory_id_seq,
        primary_key=True,
        autoincrement=True,
        server_default=memory_id_seq.next_value(),
    ),
    Column(
        "server_id", Integer, ForeignKey("servers.server_id", ondelete="CASCADE"), nullable=False
    ),
    Column(
        "persona_id", Integer, ForeignKey("personas.persona_id", ondelete="SET NULL"), nullable=True
    ),
    Column("persona_lineage_id", BigInteger, nullable=False),
    # The teacher: who taught the memory.
    Column("user_id", Integer, ForeignKey("users.user_id", ondelete="SET NULL"), nullable=True),
    Column("content", Text, nullable=False),
    Column("tags", ARRAY(Text), nullable=False, server_default=_NO_TAGS),
    _timestamp("created_at", now=True),
    _timestamp("updated_at", now=True),
    _latest_revision(),
    Index("server_memories_scope_idx", "server_id", "persona_lineage_id"),
)

personal_memories: Final = Table(
    "personal_memories",
    metadata,
    Column(
        "personal_memory_id",
        BigInteger,
        memory_id_seq,
        primary_key=True,
        server_default=memory_id_seq.next_value(),
    ),
    # The owner.
    Column("user_id", Integer, ForeignKey("users.user_id", ondelete="CASCADE"), nullable=False),
    Column("persona_lineage_id", BigInteger, nullable=False),
    Column("content", Text, nullable=False),
    Column("tags", ARRAY(Text), nullable=False, server_default=_NO_TAGS),
    _timestamp("created_at", now=True),
    _timestamp("updated_at", now=True),
    _latest_revision(),
    Index("personal_memories_scope_idx", "user_id", "persona_lineage_id"),
)

# Append-only (the migrations' trigger refuses UPDATE and DELETE); no foreign keys, so that the
# history outlives the memories, servers and users it names.
memory_revisions: Final = Table(
    "memory_revisions",
    metadata,
    Column("revision_id", BigInteger, primary_key=True),
    Column("scope", Text, nullable=False),
    Column("memory_id", BigInteger, nullable=False),
    Column("action", Text, nullable=False),
    # Null, with the after's, once redacted (an erasure: `redacted_at` says when).
    Column("content_before", Text, nullable=True),
    Column("content_after", Text, nullable=True),
    Column("server_id", Integer, nullable=True),
    Column("owner_user_id", Integer, nullable=True),
    Column("persona_lineage_id", BigInteger, nullable=False),
    Column("actor_disc_id", Text, nullable=False),
    Column("tool_call_id", Text, nullable=False),
    _timestamp("occurred_at", now=True),
    # An operator's justification of a revert (migration 0010); null for every other revision.
    Column("reason", Text, nullable=True),
    _timestamp("redacted_at", nullable=True),
    CheckConstraint("scope = ANY (ARRAY['server_wide'::text, 'target_user'::text])", name="scope"),
    CheckConstraint(
        "action = ANY (ARRAY['created'::text, 'updated'::text, 'deleted'::text, 'restored'::text])",
        name="action",
    ),
    Index("memory_revisions_memory_idx", "memory_id", "revision_id"),
    Index("memory_revisions_tool_call_idx", "tool_call_id"),
    Index("memory_revisions_actor_idx", "actor_disc_id"),
)
Index(
    "memory_revisions_owner_idx",
    memory_revisions.c.owner_user_id,
    postgresql_where=memory_revisions.c.owner_user_id.is_not(None),
)

# The idempotency record: one row per tool call, with the result it was answered.
tool_call_inbox: Final = Table(
    "tool_call_inbox",
    metadata,
    Column("tool_call_id", Text, primary_key=True),
    Column("event_id", Uuid, nullable=False),
    Column("tool_name", Text, nullable=False),
    Column("guild_id", Text, nullable=True),
    Column("channel_id", Text, nullable=False),
    Column("shard_id", Integer, nullable=False),
    Column("status", Text, nullable=True),
    Column("result", JSONB, nullable=True),
    _timestamp("received_at", now=True),
    _timestamp("completed_at", nullable=True),
    Column("fingerprint", Text, nullable=True),
    _timestamp("requested_at", nullable=True),
    # Who triggered the call (its context's), for an erasure of that user.
    Column("triggerer_id", Text, nullable=True),
    Index("tool_call_inbox_completed_at_idx", "completed_at"),
    Index("tool_call_inbox_triggerer_idx", "triggerer_id"),
)

# Events written with their change, published after commit by the relay.
outbox: Final = Table(
    "outbox",
    metadata,
    Column("outbox_id", BigInteger, primary_key=True),
    Column("event_id", Uuid, nullable=False, unique=True),
    Column("event_type", Text, nullable=False),
    Column("routing_key", Text, nullable=False),
    Column("correlation_id", Text, nullable=True),
    Column("body", LargeBinary, nullable=False),
    Column("ttl_ms", Integer, nullable=True),
    _timestamp("created_at", now=True),
    _timestamp("published_at", nullable=True),
    Column("traceparent", Text, nullable=True),
)
# Partial indexes: the relay's rows still to publish, and the published ones its sweep deletes.
Index(
    "outbox_unpublished_idx", outbox.c.outbox_id, postgresql_where=outbox.c.published_at.is_(None)
)
Index(
    "outbox_published_at_idx",
    outbox.c.published_at,
    postgresql_where=outbox.c.published_at.is_not(None),
)

# One row per answered export or erasure: who asked about whom, and what an erasure did (its
# receipt: counts, never a text). `removed_letters`: the dead letters an erasure took out
# (a digest of each), so that its rerun after a crash counts each once; `running` until then.
data_requests: Final = Table(
    "data_requests",
    metadata,
    Column("request_id", Text, primary_key=True),
    Column("kind", Text, nullable=False),
    Column("subject_kind", Text, nullable=False),
    Column("subject_id", Text, nullable=False),
    Column("requested_by_kind", Text, nullable=False),
    Column("requested_by_id", Text, nullable=False),
    # Why it was refused (null when done), as the answer says.
    Column("reason", Text, nullable=True),
    _timestamp("received_at", now=True),
    _timestamp("completed_at", nullable=True),
    Column("status", Text, nullable=False),
    Column("receipt", JSONB, nullable=True),
    Column("strict", Boolean, nullable=False, server_default=_FALSE),
    Column("keep_learning", Boolean, nullable=False, server_default=_FALSE),
    # The operator's own words (`--reason`), kept with the row.
    Column("stated_reason", Text, nullable=True),
    Column("removed_letters", ARRAY(Text), nullable=False, server_default=_NO_TAGS),
    CheckConstraint("kind = ANY (ARRAY['export'::text, 'erase'::text])", name="kind"),
    CheckConstraint("subject_kind = ANY (ARRAY['user'::text, 'guild'::text])", name="subject_kind"),
    CheckConstraint(
        "status = ANY (ARRAY['running'::text, 'done'::text, 'refused'::text])", name="status"
    ),
    Index("data_requests_received_at_idx", "received_at"),
)

# The notices the gateways posted in Discord (one per `embed.requested` they posted), kept so
# that an erasure can retract them; `retract_error` says why a retraction did not happen.
posted_notices: Final = Table(
    "posted_notices",
    metadata,
    Column("event_id", Uuid, primary_key=True),
    Column("shard_id", Integer, nullable=False),
    Column("channel_id", Text, nullable=False),
    Column("message_id", Text, nullable=False),
    Column("memory_id", BigInteger, nullable=False),
    Column("scope", Text, nullable=False),
    Column("owner_disc_id", Text, nullable=True),
    Column("guild_id", Text, nullable=True),
    _timestamp("posted_at", now=True),
    Column("retract_error", Text, nullable=True),
    Index("posted_notices_memory_idx", "memory_id"),
    Index("posted_notices_guild_idx", "guild_id"),
    Index("posted_notices_message_idx", "channel_id", "message_id"),
)
