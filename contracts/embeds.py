"""`embed.requested`: a notice the shard posts in the channel after a committed change."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt

from contracts.envelope import Event
from contracts.ids import DiscordId, ToolCallId

__all__ = [
    "DELETE_COLOR",
    "UPDATE_COLOR",
    "EmbedField",
    "EmbedKind",
    "EmbedPayload",
    "EmbedRequested",
]

UPDATE_COLOR = 0x25D4DA
DELETE_COLOR = 0xE74C3C

EmbedKind = Literal["memory_updated", "memory_deleted"]


class EmbedField(BaseModel):
    model_config = ConfigDict(strict=True, frozen=True, extra="ignore")

    name: str = Field(max_length=256)
    value: str = Field(max_length=1024)
    inline: bool = False


class EmbedPayload(BaseModel):
    """Within Discord's limits: title 256, description 4096, footer 2048, total 6000."""

    model_config = ConfigDict(strict=True, frozen=True, extra="ignore")

    title: str = Field(max_length=256)
    description: str = Field(max_length=4096)
    color: int
    footer: str | None = Field(default=None, max_length=2048)
    fields: tuple[EmbedField, ...] = Field(default=(), max_length=25)

    def total_length(self) -> int:
        return (
            len(self.title)
            + len(self.description)
            + len(self.footer or "")
            + sum(len(field.name) + len(field.value) for field in self.fields)
        )


class EmbedRequested(Event):
    EVENT_TYPE: ClassVar[str] = "embed.requested"

    event_type: Literal["embed.requested"] = "embed.requested"
    tool_call_id: ToolCallId
    guild_id: DiscordId | None
    channel_id: DiscordId
    shard_id: NonNegativeInt
    kind: EmbedKind
    embed: EmbedPayload
