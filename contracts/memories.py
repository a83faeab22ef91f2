"""Memories as the LLM reads them back: what a persona sees, and the lines it sees them as.

The bot renders each memory into the LLM's context as `ID:<id> <content>`, with
`[tags: a, b] ` between the id and the content when it has tags: the id is what the memory
tools take. Newest first (`created_at`, then the id, descending); an update does not change
`created_at`, so it keeps a memory's place.

What a persona sees: the server memories of its server and lineage, and the personal
memories of each person asked about, of its lineage and of lineage 0 (the global namespace).
Pure: the database adapter (`infra.storage.memories`) loads the rows, the gateway caches them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Final, TypeVar

from pydantic import AwareDatetime, BaseModel, ConfigDict, field_serializer

from contracts.envelope import rfc3339_utc

__all__ = [
    "GLOBAL_LINEAGE",
    "MemoryListing",
    "PersonalMemory",
    "ServerMemories",
    "ServerMemory",
    "StoredMemory",
    "UnknownPersona",
    "UnknownServer",
    "memory_line",
    "memory_lines",
    "newest_first",
]

# Personal memories of this lineage are seen by every persona.
GLOBAL_LINEAGE: Final = 0


class StoredMemory(BaseModel):
    """A memory as stored: its id (from the one sequence of both kinds), text, tags and times."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    memory_id: int
    content: str
    tags: tuple[str, ...] = ()
    created_at: AwareDatetime
    updated_at: AwareDatetime
    persona_lineage_id: int
    # Its latest `memory_revisions` row; 0 when it has none (seeded or imported). A bot passes
    # it back as the call's `context.seen`, so that an update built on an older text is refused.
    revision_id: int = 0

    @field_serializer("created_at", "updated_at")
    def _rfc3339(self, value: datetime) -> str:
        return rfc3339_utc(value)


class ServerMemory(StoredMemory):
    """A memory of a server (a guild, or a DM keyed by the user's id)."""

    teacher_id: str | None = None  # the Discord id of who taught it, when known


class PersonalMemory(StoredMemory):
    """A memory about one person, across servers."""


M = TypeVar("M", bound=StoredMemory)


def newest_first(memories: Iterable[M]) -> tuple[M, ...]:
    return tuple(
        sorted(memories, key=lambda memory: (memory.created_at, memory.memory_id), reverse=True)
    )


def memory_line(memory: StoredMemory) -> str:
    """`ID:<id> <content>`, with `[tags: a, b] ` before the content when there are tags."""
    tags = f"[tags: {', '.join(memory.tags)}] " if memory.tags else ""
    return f"ID:{memory.memory_id} {tags}{memory.content}"


def memory_lines(memories: Iterable[StoredMemory]) -> list[str]:
    return [memory_line(memory) for memory in memories]


class MemoryListing(BaseModel):
    """What one persona sees: its server memories, and each named person's personal ones.

    Its JSON is the one `ltm memory list --json` prints:
    `{"server": [memory, ...], "personal": {"<user id>": [memory, ...]}}`, newest first.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    server: tuple[ServerMemory, ...] = ()
    personal: dict[str, tuple[PersonalMemory, ...]] = {}

    def server_lines(self) -> list[str]:
        return memory_lines(self.server)

    def personal_lines(self, user_id: str) -> list[str]:
        """The person's lines; none for someone not asked about."""
        return memory_lines(self.personal.get(user_id, ()))


class UnknownServer(LookupError):
    def __init__(self, server_disc_id: str) -> None:
        super().__init__(f"no server {server_disc_id} (a guild's id, or the user's id for a DM)")
        self.server_disc_id = server_disc_id


class UnknownPersona(LookupError):
    def __init__(self, server_disc_id: str, persona_id: int) -> None:
        super().__init__(f"server {server_disc_id} has no persona {persona_id}")
        self.server_disc_id = server_disc_id
        self.persona_id = persona_id


@dataclass(frozen=True, slots=True)
class ServerMemories:
    """A server's personas (persona id → lineage) and its memories of every lineage.

    One load answers every persona of the server, and one invalidation of the server's
    persona state drops it.
    """

    server_disc_id: str
    persona_lineages: Mapping[int, int]
    memories: tuple[ServerMemory, ...]

    def lineage_of(self, persona_id: int) -> int:
        lineage = self.persona_lineages.get(persona_id)
        if lineage is None:
            raise UnknownPersona(self.server_disc_id, persona_id)
        return lineage

    def listing(
        self, persona_id: int, personal: Mapping[str, Iterable[PersonalMemory]]
    ) -> MemoryListing:
        """What `persona_id` sees of these memories and of the given people's (user id →
        their personal memories of any lineage), in the order the people are given."""
        lineage = self.lineage_of(persona_id)
        return MemoryListing(
            server=newest_first(
                memory for memory in self.memories if memory.persona_lineage_id == lineage
            ),
            personal={
                user_id: newest_first(
                    memory
                    for memory in memories
                    if memory.persona_lineage_id in (lineage, GLOBAL_LINEAGE)
                )
                for user_id, memories in personal.items()
            },
        )
