"""`cache.invalidate`: every gateway process drops one cache entry."""

from __future__ import annotations

from typing import ClassVar, Literal

from contracts.envelope import Event
from contracts.ids import DiscordId, ToolCallId

__all__ = ["CacheInvalidate", "CacheName"]

CacheName = Literal["persona_state", "user"]


class CacheInvalidate(Event):
    EVENT_TYPE: ClassVar[str] = "cache.invalidate"

    event_type: Literal["cache.invalidate"] = "cache.invalidate"
    cache: CacheName
    key: DiscordId
    tool_call_id: ToolCallId | None = None
