"""`tool_call.requested`: what a bot shard publishes when the LLM calls a tool."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, NonNegativeInt

from contracts.envelope import Event
from contracts.ids import DiscordId, MemoryIdKey, ParticipantId, ToolCallId

__all__ = [
    "CREATE_LONG_TERM_MEMORY",
    "MAX_ALIASES",
    "MAX_PARTICIPANTS",
    "MAX_REVISION_ID",
    "MAX_SEEN",
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

# Bounds on what a bot may send (docs/security.md, "Bad input stays bounded"): far above any real
# conversation, low enough that resolving a name over them stays cheap.
MAX_PARTICIPANTS: Final = 500
MAX_ALIASES: Final = 50
# What a conversation's context shows of memories: 25 server memories and 25 per person by
# default, so 500 leaves room for twenty people.
MAX_SEEN: Final = 500
# Revision ids are bigints (`memory_revisions.revision_id`): a larger one names none.
MAX_REVISION_ID: Final = 2**63 - 1

# memory id (as a string) -> the revision_id of the memory the LLM was shown (0: none).
SeenRevisions = Annotated[
    dict[MemoryIdKey, Annotated[int, Field(ge=0, le=MAX_REVISION_ID)]],
    Field(max_length=MAX_SEEN, json_schema_extra={"additionalProperties": False}),
]


class Participant(BaseModel):
    """A person of the conversation, as the LLM saw them."""

    model_config = ConfigDict(strict=True, frozen=True, extra="ignore")

    user_id: ParticipantId
    display_label: str
    aliases: tuple[str, ...] = Field(default=(), max_length=MAX_ALIASES)
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
    participants: tuple[Participant, ...] = Field(default=(), max_length=MAX_PARTICIPANTS)
    # Set by the bot from the triggerer's Discord permissions; under the edit policy
    # `teacher_or_manager`, a manager may change any memory of the server.
    triggerer_is_manager: bool = False
    # The memories the LLM was shown in this conversation, with their revisions: an update
    # or delete of one that changed since is refused (docs/behaviour.md, "What the LLM saw").
    seen: SeenRevisions | None = None

    def seen_revision(self, memory_id: int) -> int | None:
        """The revision of `memory_id` the LLM was shown; None when it was not shown it.

        Keys are read as numbers, so "041" names memory 41 as "41" does.
        """
        if not self.seen:
            return None
        by_id = {int(key): revision for key, revision in self.seen.items()}
        return by_id.get(memory_id)

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
