"""The gateway's memory reader: what it keeps in the caches, and when it loads again."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from contracts import PersonalMemory, ServerMemories, ServerMemory, UnknownPersona, UnknownServer
from gateway import GatewayCaches, MemoryReader, TTLCache

GUILD = "111111111111111111"
ALICE = "333333333333333333"
PERSONA = 10
LINEAGE = 7
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _server_memory(memory_id: int, content: str) -> ServerMemory:
    return ServerMemory(
        memory_id=memory_id,
        content=content,
        created_at=T0 - timedelta(minutes=memory_id),
        updated_at=T0,
        persona_lineage_id=LINEAGE,
    )


def _personal_memory(memory_id: int, content: str) -> PersonalMemory:
    return PersonalMemory(
        memory_id=memory_id,
        content=content,
        created_at=T0,
        updated_at=T0,
        persona_lineage_id=0,
    )


@dataclass
class FakeSource:
    """The database as the reader sees it, counting the loads.

    `during_load["server"]` / `["personal"]`: what happens while the next such load runs.
    """

    servers: dict[str, ServerMemories] = field(default_factory=dict)
    personal_memories: dict[str, tuple[PersonalMemory, ...]] = field(default_factory=dict)
    server_loads: list[str] = field(default_factory=list)
    personal_loads: list[list[str]] = field(default_factory=list)
    during_load: dict[str, Callable[[], object]] = field(default_factory=dict)

    def set_server(self, *memories: ServerMemory, personas: dict[int, int] | None = None) -> None:
        self.servers[GUILD] = ServerMemories(GUILD, personas or {PERSONA: LINEAGE}, memories)

    async def server(self, server_disc_id: str) -> ServerMemories | None:
        self.server_loads.append(server_disc_id)
        found = self.servers.get(server_disc_id)
        await self._mid_load("server")
        return found

    async def personal(self, user_ids: Iterable[str]) -> dict[str, tuple[PersonalMemory, ...]]:
        wanted = list(user_ids)
        self.personal_loads.append(wanted)
        found = {user_id: self.personal_memories.get(user_id, ()) for user_id in wanted}
        await self._mid_load("personal")
        return found

    async def _mid_load(self, kind: str) -> None:
        await asyncio.sleep(0)  # the load is under way: other tasks run
        happening = self.during_load.pop(kind, None)
        if happening is not None:
            happening()


@pytest.fixture
def caches() -> GatewayCaches[Any, Any]:
    return GatewayCaches(TTLCache(600), TTLCache(1800))


@pytest.fixture
def source() -> FakeSource:
    fake = FakeSource()
    fake.set_server(_server_memory(1, "movie night is on Fridays"))
    fake.personal_memories[ALICE] = (_personal_memory(2, "{user} plays the violin"),)
    return fake


async def test_a_second_read_comes_from_the_caches(
    source: FakeSource, caches: GatewayCaches[Any, Any]
) -> None:
    reader = MemoryReader(source, caches)

    first = await reader.read(GUILD, PERSONA, [ALICE])
    second = await reader.read(GUILD, PERSONA, [ALICE])

    assert second == first
    assert first.server_lines() == ["ID:1 movie night is on Fridays"]
    assert first.personal_lines(ALICE) == ["ID:2 {user} plays the violin"]
    assert source.server_loads == [GUILD]
    assert source.personal_loads == [[ALICE]]


async def test_an_invalidation_of_the_server_loads_its_memories_again(
    source: FakeSource, caches: GatewayCaches[Any, Any]
) -> None:
    reader = MemoryReader(source, caches)
    await reader.read(GUILD, PERSONA, [ALICE])
    source.set_server(_server_memory(1, "movie night is on Saturdays"))

    caches.invalidate("persona_state", GUILD)
    listing = await reader.read(GUILD, PERSONA, [ALICE])

    assert listing.server_lines() == ["ID:1 movie night is on Saturdays"]
    assert source.server_loads == [GUILD, GUILD]
    assert source.personal_loads == [[ALICE]]  # the user cache was not touched


async def test_an_invalidation_of_a_user_loads_only_that_users_memories_again(
    source: FakeSource, caches: GatewayCaches[Any, Any]
) -> None:
    bob = "222222222222222222"
    reader = MemoryReader(source, caches)
    await reader.read(GUILD, PERSONA, [ALICE, bob])
    source.personal_memories[ALICE] = (_personal_memory(2, "{user} plays the cello"),)

    caches.invalidate("user", ALICE)
    listing = await reader.read(GUILD, PERSONA, [ALICE, bob])

    assert listing.personal_lines(ALICE) == ["ID:2 {user} plays the cello"]
    assert listing.personal_lines(bob) == []
    assert source.personal_loads == [[ALICE, bob], [ALICE]]
    assert source.server_loads == [GUILD]


async def test_a_load_overtaken_by_an_invalidation_is_returned_but_not_kept(
    source: FakeSource, caches: GatewayCaches[Any, Any]
) -> None:
    reader = MemoryReader(source, caches)
    # The rows were read before a change committed, whose invalidation arrives mid-load.
    source.during_load["server"] = lambda: caches.invalidate("persona_state", GUILD)
    source.during_load["personal"] = lambda: caches.invalidate("user", ALICE)

    await reader.read(GUILD, PERSONA, [ALICE])
    await reader.read(GUILD, PERSONA, [ALICE])

    assert source.server_loads == [GUILD, GUILD]
    assert source.personal_loads == [[ALICE], [ALICE]]


async def test_an_invalidation_of_another_key_does_not_stop_a_load_being_kept(
    source: FakeSource, caches: GatewayCaches[Any, Any]
) -> None:
    reader = MemoryReader(source, caches)
    source.during_load["server"] = lambda: caches.invalidate("persona_state", "999")
    source.during_load["personal"] = lambda: caches.invalidate("persona_state", ALICE)

    await reader.read(GUILD, PERSONA, [ALICE])
    await reader.read(GUILD, PERSONA, [ALICE])

    assert source.server_loads == [GUILD]
    assert source.personal_loads == [[ALICE]]


async def test_nothing_is_kept_while_invalidations_do_not_arrive(
    source: FakeSource, caches: GatewayCaches[Any, Any]
) -> None:
    listening = False
    reader = MemoryReader(source, caches, listening=lambda: listening)

    await reader.read(GUILD, PERSONA, [ALICE])
    await reader.read(GUILD, PERSONA, [ALICE])
    assert len(source.server_loads) == 2
    assert len(caches.persona_state) == 0 and len(caches.user) == 0

    listening = True
    await reader.read(GUILD, PERSONA, [ALICE])
    await reader.read(GUILD, PERSONA, [ALICE])
    assert len(source.server_loads) == 3


async def test_a_persona_added_since_the_server_was_kept_is_found(
    source: FakeSource, caches: GatewayCaches[Any, Any]
) -> None:
    reader = MemoryReader(source, caches)
    await reader.read(GUILD, PERSONA)
    source.set_server(_server_memory(1, "movie night"), personas={PERSONA: LINEAGE, 12: 99})

    listing = await reader.read(GUILD, 12)

    assert listing.server == ()  # lineage 99 has no memories here
    assert source.server_loads == [GUILD, GUILD]


async def test_an_unknown_persona_or_server_is_refused_and_not_kept(
    source: FakeSource, caches: GatewayCaches[Any, Any]
) -> None:
    reader = MemoryReader(source, caches)

    with pytest.raises(UnknownPersona):
        await reader.read(GUILD, 12)
    with pytest.raises(UnknownServer):
        await reader.read("999", PERSONA)
    with pytest.raises(UnknownServer):
        await reader.read("999", PERSONA)

    assert source.server_loads == [GUILD, GUILD, "999", "999"]
    assert caches.persona_state.get("999") is None


async def test_a_load_overtaken_by_a_clear_of_the_caches_is_not_kept(
    source: FakeSource, caches: GatewayCaches[Any, Any]
) -> None:
    reader = MemoryReader(source, caches)
    await reader.read(GUILD, PERSONA, [ALICE])
    caches.invalidate("persona_state", GUILD)
    # The connection was lost mid-load: invalidations may have been missed meanwhile.
    source.during_load["server"] = caches.clear

    await reader.read(GUILD, PERSONA, [ALICE])
    await reader.read(GUILD, PERSONA, [ALICE])

    assert source.server_loads == [GUILD, GUILD, GUILD]
    assert source.personal_loads == [[ALICE], [ALICE]]  # its entry went with the clear


def test_a_clear_empties_both_caches() -> None:
    caches: GatewayCaches[str, str] = GatewayCaches(TTLCache(600), TTLCache(1800))
    caches.persona_state.set(GUILD, "state")
    caches.user.set(ALICE, "user")
    generation = caches.generation

    caches.clear()

    assert caches.persona_state.get(GUILD) is None and caches.user.get(ALICE) is None
    assert caches.generation == generation + 1
