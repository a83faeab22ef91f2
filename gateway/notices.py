"""The notices this gateway posted (`posted_notices`): recorded as each is posted, deleted
once an erasure's `notice.retract` took it back, marked when Discord refused that.

A row is keyed by the `embed.requested` event's id, so recording a notice twice (a
redelivered embed Discord answered with the first message, by its nonce) keeps one row. A
retraction names the message (`channel_id`, `message_id`), which is what it acts on.
"""

from __future__ import annotations

from typing import Literal, Protocol

from sqlalchemy import ColumnElement, and_, delete, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncEngine

from contracts import EmbedRequested
from gateway.database import open_engine
from infra.settings import Settings
from infra.storage.schema import posted_notices

__all__ = ["NoticeRecords", "PostedNotices", "RetractError"]

# What `retract_error` says: Discord answered 403, or another refusal.
RetractError = Literal["forbidden", "rejected"]


class NoticeRecords(Protocol):
    """Where the shard consumer records notices and settles their retraction."""

    async def record(self, notice: EmbedRequested, message_id: str) -> bool: ...

    async def retracted(self, channel_id: str, message_id: str) -> int: ...

    async def refused(self, channel_id: str, message_id: str, error: RetractError) -> int: ...


class PostedNotices:
    """Writes `posted_notices` through `engine` (closed by `close` when it is the reader's own)."""

    def __init__(self, engine: AsyncEngine, *, owns_engine: bool = False) -> None:
        self._engine = engine
        self._owns_engine = owns_engine

    @classmethod
    def from_settings(cls, settings: Settings) -> PostedNotices:
        """With a pool of its own (one connection), opened on the first write."""
        return cls(open_engine(settings, pool_size=1), owns_engine=True)

    async def close(self) -> None:
        if self._owns_engine:
            await self._engine.dispose()

    async def record(self, notice: EmbedRequested, message_id: str) -> bool:
        """Records a posted notice about a memory; False for one that names no memory (an
        older worker's), which nothing could retract."""
        if notice.memory_id is None or notice.scope is None:
            return False
        async with self._engine.begin() as connection:
            await connection.execute(
                insert(posted_notices)
                .values(
                    event_id=notice.event_id,
                    shard_id=notice.shard_id,
                    channel_id=notice.channel_id,
                    message_id=message_id,
                    memory_id=notice.memory_id,
                    scope=notice.scope,
                    owner_disc_id=notice.owner_disc_id,
                    guild_id=notice.guild_id,
                )
                .on_conflict_do_nothing(index_elements=[posted_notices.c.event_id])
            )
        return True

    async def retracted(self, channel_id: str, message_id: str) -> int:
        """Deletes the notice's row (it is gone from Discord); how many rows went."""
        async with self._engine.begin() as connection:
            result = await connection.execute(
                delete(posted_notices).where(self._of(channel_id, message_id))
            )
        return int(result.rowcount or 0)

    async def refused(self, channel_id: str, message_id: str, error: RetractError) -> int:
        """Keeps the row, saying why the message could not be deleted; how many rows."""
        async with self._engine.begin() as connection:
            result = await connection.execute(
                update(posted_notices)
                .where(self._of(channel_id, message_id))
                .values(retract_error=error)
            )
        return int(result.rowcount or 0)

    @staticmethod
    def _of(channel_id: str, message_id: str) -> ColumnElement[bool]:
        return and_(
            posted_notices.c.channel_id == channel_id, posted_notices.c.message_id == message_id
        )
