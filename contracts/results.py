"""`tool_call.completed`: the answer to one tool call, routed to the shard that asked."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, NonNegativeInt, model_serializer

from contracts.envelope import Event
from contracts.ids import DiscordId, ToolCallId
from contracts.statuses import MemoryStatus

__all__ = ["MemoryFallback", "MemoryScope", "ResultData", "ToolCallCompleted"]

MemoryScope = Literal["server_wide", "target_user"]
# Why a memory about a person was saved server-wide: the person is a bot (or the bot itself),
# or a bridged user, who has only server memories.
MemoryFallback = Literal["bot", "bridge_user"]


class ResultData(BaseModel):
    """What the LLM is given besides the message; each field only where it applies."""

    model_config = ConfigDict(strict=True, frozen=True, extra="ignore")

    scope: MemoryScope | None = None
    memory_id: int | None = None
    content_saved: str | None = None
    content_deleted: str | None = None
    target_user: str | None = None
    candidates: tuple[str, ...] | None = None
    fallback: MemoryFallback | None = None
    current_count: int | None = None
    max_allowed: int | None = None
    # A conflict: the memory as it is now, which the LLM was not shown.
    current_revision_id: int | None = None
    current_content: str | None = None
    # Why a failure happened, where its status alone does not say (`tool_call_id_reused`,
    # `deleted_since_shown`).
    reason: str | None = None

    @model_serializer(mode="wrap")
    def _omit_absent(self, handler: Any) -> dict[str, Any]:
        dumped: dict[str, Any] = handler(self)
        return {key: value for key, value in dumped.items() if value is not None}


class ToolCallCompleted(Event):
    EVENT_TYPE: ClassVar[str] = "tool_call.completed"

    event_type: Literal["tool_call.completed"] = "tool_call.completed"
    tool_call_id: ToolCallId
    tool_name: str
    guild_id: DiscordId | None
    channel_id: DiscordId
    shard_id: NonNegativeInt
    success: bool
    status: MemoryStatus
    message: str
    data: ResultData = ResultData()

    def for_llm(self) -> dict[str, Any]:
        """The tool result the LLM sees: status, message and data, nothing of the transport."""
        return {
            "success": self.success,
            "status": self.status.value,
            "message": self.message,
            **self.data.model_dump(mode="json"),
        }
