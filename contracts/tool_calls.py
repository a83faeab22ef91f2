"""`tool_call.requested`: what a bot shard publishes when the LLM calls a tool."""

from __future__ import annotations

from typing import Any, ClassVar, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, NonNegativeInt

from contracts.envelope import Event
from contracts.ids import DiscordId, ParticipantId, ToolCallId

__all__ = [
    "CREATE_LONG_TERM_MEMORY",
    "REMEMBER_THIS_FACT",
    "TOOL_NAMES",
    "UPDATE_LONG_TERM_MEMORY",
    "Participant",
    "ToolCallContext",
    "ToolCallRequested",
]

UPDATE_LONG_TERM_MEMORY: Final = "update_long_term_memory"
CREATE_LONG_TERM_MEMORY: Final = "create_long_term_memory"
# The create tool's name in bots written before it was renamed: the same tool.
REMEMBER_THIS_FACT: Final = "remember_this_fact"

# Every tool name the worker takes: each is a routing key bound to the worker's queue.
TOOL_NAMES: Final = (UPDATE_LONG_TERM_MEMORY, CREATE_LONG_TERM_MEMORY, REMEMBER_THIS_FACT)


class Participant(BaseModel):
    """A person of the conversation, as the LLM saw them."""

    model_config = ConfigDict(strict=True, frozen=True, extra="ignore")

    user_id: ParticipantId
    display_label: str
    aliases: tuple[str, ...] = ()
    is_bot: bool = False
    is_member: bool = True


class ToolCallContext(BaseModel):
    model_config = ConfigDict(strict=True, frozen=True, extra="ignore")

    guild_id: DiscordId | None
    channel_id: DiscordId
    triggerer_id: DiscordId
    bot_user_id: DiscordId
    persona_id: int
    shard_id: NonNegativeInt
    locale: str = "en-US"
    participants: tuple[Participant, ...] = ()
    # Set by the bot from the triggerer's Discord permissions; under the edit policy
    # `teacher_or_manager`, a manager may change any memory of the server.
    triggerer_is_manager: bool = False

    @property
    def server_disc_id(self) -> str:
        """The server key: the guild, or the triggerer in a DM (a DM is a small server)."""
        return self.guild_id if self.guild_id is not None else self.triggerer_id

    @property
    def is_dm(self) -> bool:
        return self.guild_id is None


class ToolCallRequested(Event):
    EVENT_TYPE: ClassVar[str] = "tool_call.requested"

    event_type: Literal["tool_call.requested"] = "tool_call.requested"
    tool_call_id: ToolCallId
    tool_name: str
    # Untrusted: exactly as the LLM produced them, validated by the pipeline, not here.
    arguments: JsonValue = Field(default_factory=dict)
    context: ToolCallContext

    def arguments_object(self) -> dict[str, Any] | None:
        return self.arguments if isinstance(self.arguments, dict) else None
