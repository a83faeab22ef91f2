"""The world a chaos run seeds: guilds and a DM, personas, people and memories of both scopes.

The rows are written by the harness's world builder; what was written is kept here as plain
values (`ChaosWorld`), which the plan draws its calls from and the checks compare with.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from harness.world import BOT_USER_ID, Server
from harness.world import World as WorldBuilder

__all__ = [
    "ChaosWorld",
    "Memory",
    "Persona",
    "Place",
    "ScopeRef",
    "User",
    "seed_world",
]

# (scope, the server's server_id or the owner's user_id, lineage): where a creation counts.
ScopeRef = tuple[str, int, int]


@dataclass(frozen=True)
class User:
    user_id: int
    disc_id: str
    name: str
    privacy: int


@dataclass(frozen=True)
class Persona:
    persona_id: int
    lineage: int


@dataclass(frozen=True)
class Place:
    """A guild, or a DM (keyed by its one user's id)."""

    server_id: int
    disc_id: str
    is_dm: bool
    personas: tuple[Persona, ...]
    members: tuple[User, ...]  # in a DM: the user


@dataclass(frozen=True)
class Memory:
    memory_id: int
    scope: Literal["server_wide", "target_user"]
    content: str
    lineage: int
    server_id: int | None = None  # server memories
    owner: User | None = None  # personal memories


@dataclass
class ChaosWorld:
    places: list[Place]
    users: list[User]
    memories: dict[int, Memory]
    # The workers' LTM_MAX_SERVER_MEMORIES and LTM_MAX_PERSONAL_MEMORIES: a few above what the
    # seeded scopes hold, so that creations reach them.
    server_limit: int = 25
    personal_limit: int = 25

    def limit(self, scope: ScopeRef) -> int:
        return self.server_limit if scope[0] == "server_wide" else self.personal_limit

    def seeded_in(self, scope: ScopeRef) -> list[Memory]:
        """The seeded memories a creation in `scope` is counted and compared with."""
        kind, anchor, lineage = scope
        if kind == "server_wide":
            return [
                m
                for m in self.memories.values()
                if m.scope == kind and m.server_id == anchor and m.lineage == lineage
            ]
        return [
            m
            for m in self.memories.values()
            if m.scope == kind
            and m.owner is not None
            and m.owner.user_id == anchor
            and m.lineage in (lineage, 0)
        ]

    def server_memories(self, place: Place, lineage: int) -> list[Memory]:
        return [
            memory
            for memory in self.memories.values()
            if memory.scope == "server_wide"
            and memory.server_id == place.server_id
            and memory.lineage == lineage
        ]

    def personal_memories(self, owner: User, lineages: Sequence[int]) -> list[Memory]:
        return [
            memory
            for memory in self.memories.values()
            if memory.scope == "target_user"
            and memory.owner == owner
            and memory.lineage in lineages
        ]


def _lineage(rng: random.Random) -> int:
    return rng.randint(10**6, 2**40)


class _Seeder:
    """Writes the world through the builder, keeping what it wrote."""

    def __init__(self, builder: WorldBuilder, rng: random.Random, per_persona: int) -> None:
        self.builder = builder
        self.rng = rng
        self.per_persona = per_persona
        self.preset = _lineage(rng)  # a preset persona: one lineage in every place
        self.users: list[User] = []
        self.places: list[Place] = []
        self.memories: dict[int, Memory] = {}

    async def people(self, count: int) -> None:
        for n in range(count):
            privacy = 1 if n % 9 == 4 else 0
            user_id, disc_id = await self.builder.user(privacy_level=privacy)
            self.users.append(User(user_id, disc_id, f"Chaos{n}", privacy))

    async def place(self, n: int, *, is_dm: bool) -> None:
        dm_user = self.users[-1]
        server = await self.builder.server(dm_user.disc_id if is_dm else None, is_dm=is_dm)
        lineages = [self.preset] if is_dm else [self.preset, _lineage(self.rng)]
        personas = [
            await self.builder.persona(server, lineage=lineage, nickname=f"Persona{n}")
            for lineage in lineages
        ]
        members = (dm_user,) if is_dm else await self._members(server)
        for persona in personas:
            for _ in range(self.per_persona):
                content = f"seeded server memory {len(self.memories)}"
                memory_id = await self.builder.server_memory(persona, content)
                self._keep(
                    Memory(memory_id, "server_wide", content, persona.lineage, server.server_id)
                )
        # A memory of this server under a lineage no persona here has: out of reach.
        lineage, content = _lineage(self.rng), f"seeded server memory {len(self.memories)}"
        memory_id = await self.builder.server_memory_of_lineage(server, lineage, content)
        self._keep(Memory(memory_id, "server_wide", content, lineage, server.server_id))
        kept = tuple(Persona(p.persona_id, p.lineage) for p in personas)
        self.places.append(Place(server.server_id, server.disc_id, is_dm, kept, members))

    async def _members(self, server: Server) -> tuple[User, ...]:
        """A few of the people, and the bot itself (a member, as a bot)."""
        others = self.users[:-1]
        members = tuple(self.rng.sample(others, k=min(len(others), self.rng.randint(4, 6))))
        for member in members:
            await self.builder.member(
                server, member.disc_id, member.name.lower(), display_name=member.name
            )
        await self.builder.member(server, BOT_USER_ID, "tomori", display_name="Tomori", is_bot=True)
        return members

    async def personal_memories(self) -> None:
        """Four per person: global (lineage 0), the preset persona's, a guild persona's, and
        one of a lineage nobody plays here."""
        own = [place.personas[-1].lineage for place in self.places if not place.is_dm]
        for user in self.users:
            for lineage in (0, self.preset, self.rng.choice(own), _lineage(self.rng)):
                content = f"seeded personal memory {len(self.memories)}"
                memory_id = await self.builder.personal_memory(user.user_id, lineage, content)
                self._keep(Memory(memory_id, "target_user", content, lineage, owner=user))

    def _keep(self, memory: Memory) -> None:
        self.memories[memory.memory_id] = memory


async def seed_world(database_url: str, rng: random.Random, calls: int) -> ChaosWorld:
    """Guilds with a preset persona (one lineage everywhere) and one of their own, a DM, people
    (a few of them privacy-restricted), memories of both scopes: about one memory per six
    calls, so that calls meet on the same memories."""
    guilds = max(3, min(12, calls // 150))
    per_persona = max(3, calls // (guilds * 2 * 6 + 6))
    builder = await WorldBuilder(database_url).open()
    try:
        seeder = _Seeder(builder, rng, per_persona)
        await seeder.people(guilds * 3 + 2)
        for n in range(guilds + 1):
            await seeder.place(n, is_dm=n == guilds)
        await seeder.personal_memories()
    finally:
        await builder.close()
    return ChaosWorld(
        seeder.places,
        seeder.users,
        seeder.memories,
        server_limit=per_persona + 3,
        personal_limit=5,
    )
