"""What the Data requests page reads: the answered requests (`data_requests`), newest first,
and the notices a gateway could not retract (`posted_notices` whose `retract_error` is set).

Read column by column: the page shows the rows whatever else a later migration adds."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = ["DataRequestRecords", "DataRequestRow", "UnretractedNotice"]

# Rows the page lists at most.
SHOWN: Final = 200

_REQUESTS: Final = text(
    """
    SELECT request_id, kind, subject_kind, subject_id, requested_by_kind, requested_by_id,
           reason, received_at, completed_at, status, receipt
    FROM data_requests
    ORDER BY received_at DESC, request_id
    LIMIT :limit
    """
)
_UNRETRACTED: Final = text(
    """
    SELECT event_id, shard_id, channel_id, message_id, memory_id, guild_id, posted_at,
           retract_error
    FROM posted_notices
    WHERE retract_error IS NOT NULL
    ORDER BY posted_at DESC
    LIMIT :limit
    """
)


@dataclass(frozen=True, slots=True)
class DataRequestRow:
    request_id: str
    kind: str
    subject_kind: str
    subject_id: str
    requested_by_kind: str
    requested_by_id: str
    reason: str | None
    received_at: datetime
    completed_at: datetime | None
    status: str
    receipt: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class UnretractedNotice:
    event_id: str
    shard_id: int
    channel_id: str
    message_id: str
    memory_id: int
    guild_id: str | None
    posted_at: datetime
    retract_error: str


class DataRequestRecords:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def requests(self, limit: int = SHOWN) -> list[DataRequestRow]:
        """The newest requests."""
        return [DataRequestRow(**row) for row in await self._read(_REQUESTS, limit)]

    async def unretracted(self, limit: int = SHOWN) -> list[UnretractedNotice]:
        """The notices Discord refused to delete."""
        rows = await self._read(_UNRETRACTED, limit)
        return [UnretractedNotice(**{**row, "event_id": str(row["event_id"])}) for row in rows]

    async def _read(self, query: Any, limit: int) -> list[dict[str, Any]]:
        async with self._engine.connect() as connection:
            result = await connection.execute(query, {"limit": limit})
            return [dict(row) for row in result.mappings()]
