"""The memories a persona sees, for the LLM's context, read through the gateway's caches.

`await gateway.memories.read(server_disc_id, persona_id, user_ids)` returns a
`contracts.MemoryListing`: the server memories and each named person's personal memories,
newest first, with their `ID:<id> …` lines (`server_lines()`, `personal_lines(user_id)`).

A server's personas and memories are kept in the persona-state cache under the server's key
(the guild's id, or the user's id in a DM), a person's personal memories in the user cache
under their Discord id: the keys the worker's `cache.invalidate` names. So the next read
after a change, in every gateway process, loads them again. These entries are the reader's:
a bot keeping state of its own keeps it elsewhere (`caches.add_listener` tells it when to
drop it).

A load is returned but not kept when an invalidation of its key, or a `clear` of the caches,
overtook it (it may have read the rows before the change committed), and nothing is kept while
invalidations do not arrive (before `start`, after `stop`, while the broker connection is
down: the gateway clears the caches when it is lost).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from sqlalchemy.ext.asyncio import AsyncEngine

from contracts import CacheName, MemoryListing, PersonalMemory, ServerMemories, UnknownServer
from gateway.caches import GatewayCaches
from gateway.database import open_engine
from infra.observability.logs import get_logger
from infra.settings import Settings
from infra.storage.memories import MemoryQueries

__all__ = ["MemoryReader", "MemorySource"]

log = get_logger(__name__)


class MemorySource(Protocol):
    """Where the memories come from (`infra.storage.memories.MemoryQueries`: the database)."""

    async def server(self, server_disc_id: str) -> ServerMemories | None: ...

    async def personal(self, user_ids: Iterable[str]) -> dict[str, tuple[PersonalMemory, ...]]: ...


@dataclass(frozen=True, slots=True)
class _PersonalMemories:
    """A user-cache entry: the person's personal memories of every lineage."""

    memories: tuple[PersonalMemory, ...]


@dataclass(slots=True)
class _Load:
    """A load in flight: whether invalidations reached the caches when it began, the caches'
    generation then, and the keys whose invalidation arrived while it ran."""

    listened_from_start: bool
    generation: int
    overtaken: set[str] = field(default_factory=set)


class MemoryReader:
    """Reads what a persona sees, keeping it in the gateway's persona-state and user caches."""

    def __init__(
        self,
        source: MemorySource,
        caches: GatewayCaches[Any, Any],
        *,
        listening: Callable[[], bool] = lambda: True,
        engine: AsyncEngine | None = None,
    ) -> None:
        """`listening`: whether invalidations reach `caches` now; entries are kept only then.
        `engine`: the reader's own, closed by `close`."""
        self._source = source
        self._caches = caches
        self._listening = listening
        self._engine = engine
        self._loads: dict[tuple[CacheName, str], list[_Load]] = {}
        caches.add_listener(self._invalidated)

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        caches: GatewayCaches[Any, Any],
        *,
        listening: Callable[[], bool] = lambda: True,
        pool_size: int = 2,
    ) -> MemoryReader:
        """With a connection pool of its own, opened on the first read."""
        engine = open_engine(settings, pool_size=pool_size)
        return cls(MemoryQueries(engine), caches, listening=listening, engine=engine)

    async def close(self) -> None:
        """Closes the pool's connections (a later read opens new ones)."""
        if self._engine is not None:
            await self._engine.dispose()

    async def read(
        self, server_disc_id: str, persona_id: int, user_ids: Iterable[str] = ()
    ) -> MemoryListing:
        """What the persona sees in that server (a guild's id, or the user's id for a DM) of
        its memories and of the given people's (their Discord ids).

        Raises `UnknownServer` or `UnknownPersona` (the persona is not one of the server's).
        """
        server = await self._server(server_disc_id)
        if persona_id not in server.persona_lineages:
            # A persona added since the entry was loaded: look once more before refusing.
            server = await self._server(server_disc_id, cached=False)
        server.lineage_of(persona_id)  # refused before anyone's personal memories are read
        return server.listing(persona_id, await self._personal(user_ids))

    async def _server(self, key: str, *, cached: bool = True) -> ServerMemories:
        entry = self._caches.persona_state.get(key) if cached else None
        if isinstance(entry, ServerMemories):
            return entry
        with self._loading("persona_state", (key,)) as load:
            server = await self._source.server(key)
        if server is None:
            raise UnknownServer(key)
        if self._keeps(load, key):
            self._caches.persona_state.set(key, server)
        log.debug("memories.loaded", cache="persona_state", key=key, count=len(server.memories))
        return server

    async def _personal(self, user_ids: Iterable[str]) -> dict[str, tuple[PersonalMemory, ...]]:
        wanted = list(dict.fromkeys(user_ids))
        found: dict[str, tuple[PersonalMemory, ...]] = {}
        for user_id in wanted:
            entry = self._caches.user.get(user_id)
            if isinstance(entry, _PersonalMemories):
                found[user_id] = entry.memories
        missing = [user_id for user_id in wanted if user_id not in found]
        if missing:
            with self._loading("user", missing) as load:
                loaded = await self._source.personal(missing)
            for user_id, memories in loaded.items():
                if self._keeps(load, user_id):
                    self._caches.user.set(user_id, _PersonalMemories(memories))
            found.update(loaded)
            log.debug("memories.loaded", cache="user", keys=missing)
        return {user_id: found[user_id] for user_id in wanted}

    @contextmanager
    def _loading(self, cache: CacheName, keys: Iterable[str]) -> Iterator[_Load]:
        load = _Load(self._listening(), self._caches.generation)
        entries = [(cache, key) for key in keys]
        for entry in entries:
            self._loads.setdefault(entry, []).append(load)
        try:
            yield load
        finally:
            for entry in entries:
                loads = self._loads[entry]
                loads.remove(load)
                if not loads:
                    del self._loads[entry]

    def _invalidated(self, cache: CacheName, key: str) -> None:
        for load in self._loads.get((cache, key), ()):
            load.overtaken.add(key)

    def _keeps(self, load: _Load, key: str) -> bool:
        return (
            load.listened_from_start
            and self._listening()
            and load.generation == self._caches.generation
            and key not in load.overtaken
        )
