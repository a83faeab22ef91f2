"""What the core decides over: the facts the database adapter loads, and what the core returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from contracts import MemoryScope, MemoryStatus, ResultData

__all__ = [
    "AmbiguousUser",
    "DirectoryMember",
    "ForbiddenWrite",
    "MemoryEditPolicy",
    "MemoryScope",
    "MemoryWrite",
    "NoSuchUser",
    "Rejection",
    "Resolution",
    "ResolvedUser",
    "ServerState",
    "StaleWrite",
    "StoredUser",
    "UpdateArguments",
    "WrittenMemory",
]


@dataclass(frozen=True, slots=True)
class UpdateArguments:
    """The update tool's arguments after validation. `target_user` is None when absent or blank."""

    memory_id: int
    content: str
    target_user: str | None


# server_configs.memory_edit_policy: who may change a memory through the tool.
MemoryEditPolicy = Literal["anyone", "teacher_or_manager"]


@dataclass(frozen=True, slots=True)
class ServerState:
    """The server and persona of the call, with the server's configuration."""

    server_id: int
    server_disc_id: str
    persona_id: int
    persona_server_id: int
    persona_lineage_id: int
    persona_nickname: str
    self_teaching_enabled: bool = True
    personal_memories_enabled: bool = True
    memory_edit_policy: MemoryEditPolicy = "anyone"


@dataclass(frozen=True, slots=True)
class DirectoryMember:
    """A current member of the guild (`guild_members`), with the bot's nickname for them."""

    user_disc_id: str
    username: str
    display_name: str | None = None
    global_name: str | None = None
    user_nickname: str | None = None  # users.user_nickname, when the bot stored one
    is_bot: bool = False


@dataclass(frozen=True, slots=True)
class StoredUser:
    """A row of `users`, and whether the user is excluded from personalization here."""

    user_id: int
    user_disc_id: str
    privacy_level: int = 0
    blacklisted_here: bool = False


@dataclass(frozen=True, slots=True)
class ResolvedUser:
    """One person `target_user` named."""

    user_id: str  # a Discord id, or a Matrix id for a bridge user
    label: str
    is_bot: bool = False
    via: Literal["matrix", "mention", "participant", "directory"] = "participant"


@dataclass(frozen=True, slots=True)
class AmbiguousUser:
    candidates: tuple[str, ...]  # up to 3 labels


@dataclass(frozen=True, slots=True)
class NoSuchUser:
    pass


Resolution = ResolvedUser | AmbiguousUser | NoSuchUser


@dataclass(frozen=True, slots=True)
class Rejection:
    """A failure result of steps 1 to 8: answered, recorded, never retried."""

    status: MemoryStatus
    message: str
    data: ResultData = field(default_factory=ResultData)


@dataclass(frozen=True, slots=True)
class MemoryWrite:
    """The scoped write the core decided on. `content` None deletes."""

    scope: MemoryScope
    memory_id: int
    content: str | None
    server_id: int
    persona_lineage_id: int
    owner_user_id: int | None = None  # personal path: users.user_id of the owner
    owner_disc_id: str | None = None
    owner_label: str | None = None
    # The edit policy lets the triggerer change the memory only if it taught or owns it:
    # checked by the statement that matches and writes the row.
    only_own: bool = False
    # The revision of the memory the LLM was shown (`context.seen`), None when it was not
    # shown it: the statement writes only while the row is still at that revision.
    seen_revision_id: int | None = None

    @property
    def is_delete(self) -> bool:
        return self.content is None


@dataclass(frozen=True, slots=True)
class WrittenMemory:
    """What the database returned for a committed write."""

    revision_id: int
    content_before: str
    persona_lineage_id: int  # the row's own lineage (0 for a global personal memory)


@dataclass(frozen=True, slots=True)
class ForbiddenWrite:
    """The write matched a memory in scope, which the edit policy kept from this triggerer."""


@dataclass(frozen=True, slots=True)
class StaleWrite:
    """The write matched a memory that changed since the LLM was shown it: nothing written.
    The memory as it is now (content as stored)."""

    current_revision_id: int
    current_content: str
