"""`embed.requested`: a notice the shard posts in the channel after a committed change."""

from __future__ import annotations

from typing import ClassVar, Final, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, model_validator

from contracts.envelope import Event
from contracts.ids import DiscordId, ToolCallId
from contracts.results import MemoryScope

__all__ = [
    "CREATE_COLOR",
    "DELETE_COLOR",
    "DESCRIPTION_LIMIT",
    "FIELD_COUNT_LIMIT",
    "FIELD_NAME_LIMIT",
    "FIELD_VALUE_LIMIT",
    "FOOTER_LIMIT",
    "TITLE_LIMIT",
    "TOTAL_LIMIT",
    "UPDATE_COLOR",
    "EmbedField",
    "EmbedKind",
    "EmbedPayload",
    "EmbedRequested",
]

CREATE_COLOR = 0x2ECC71
UPDATE_COLOR = 0x25D4DA
DELETE_COLOR = 0xE74C3C

# Discord's limits on an embed, in characters; the total counts title, description, footer
# and the fields' names and values.
TITLE_LIMIT: Final = 256
DESCRIPTION_LIMIT: Final = 4096
FIELD_NAME_LIMIT: Final = 256
FIELD_VALUE_LIMIT: Final = 1024
FIELD_COUNT_LIMIT: Final = 25
FOOTER_LIMIT: Final = 2048
TOTAL_LIMIT: Final = 6000

EmbedKind = Literal["memory_created", "memory_updated", "memory_deleted"]


class EmbedField(BaseModel):
    model_config = ConfigDict(strict=True, frozen=True, extra="ignore")

    name: str = Field(max_length=FIELD_NAME_LIMIT)
    value: str = Field(max_length=FIELD_VALUE_LIMIT)
    inline: bool = False


class EmbedPayload(BaseModel):
    """Within Discord's limits: title 256, description 4096, footer 2048, total 6000."""

    model_config = ConfigDict(strict=True, frozen=True, extra="ignore")

    title: str = Field(max_length=TITLE_LIMIT)
    description: str = Field(max_length=DESCRIPTION_LIMIT)
    color: int
    footer: str | None = Field(default=None, max_length=FOOTER_LIMIT)
    fields: tuple[EmbedField, ...] = Field(default=(), max_length=FIELD_COUNT_LIMIT)

    @model_validator(mode="after")
    def _within_the_total(self) -> Self:
        # Discord refuses the whole message otherwise; no single field's limit catches it.
        if self.total_length() > TOTAL_LIMIT:
            raise ValueError(
                f"the embed's parts add up to {self.total_length()} characters, "
                f"over Discord's total of {TOTAL_LIMIT}"
            )
        return self

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
    # The memory the notice is about, so that the gateway records the notice it posts and an
    # erasure of the memory's subject can take it back (absent from older workers' events).
    memory_id: int | None = None
    scope: MemoryScope | None = None
    owner_disc_id: DiscordId | None = None
