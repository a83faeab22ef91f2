"""Small TTL caches the bot keeps, and the consumer that drops entries on `cache.invalidate`.

- persona-state cache: key the guild id, or the user id in a DM (`persona_state`);
  entries live `Settings.persona_cache_ttl_s` (10 minutes by default).
- user cache: key the user's Discord id (`user`); `Settings.user_cache_ttl_s` (30 minutes).

Every gateway process consumes every invalidation through a queue of its own
(`<prefix>.gateway.cache.<instance>`, exclusive and auto-delete, named so that a reconnect
can declare it again). Dropping an entry is idempotent, so no deduplication is needed.
The queue goes with its connection, and with it the invalidations published while the
connection is down: the gateway then clears both caches (`GatewayCaches.clear`).
"""

from __future__ import annotations

import os
import secrets
import socket
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

from aio_pika.abc import AbstractChannel, AbstractIncomingMessage

from contracts import CacheInvalidate, CacheName, Event, Topology
from gateway.consumer import EventConsumer
from gateway.metrics import GatewayMetrics
from infra.messaging.settlement import Outcome
from infra.messaging.topology import declare_cache_queue
from infra.observability.logs import get_logger
from infra.settings import Settings

__all__ = [
    "CacheInvalidationConsumer",
    "GatewayCaches",
    "InvalidationListener",
    "TTLCache",
    "instance_name",
]

log = get_logger(__name__)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
P = TypeVar("P")
U = TypeVar("U")

InvalidationListener = Callable[[CacheName, str], None]


class TTLCache(Generic[K, V]):
    """A mapping whose entries expire `ttl_s` after they were set; least recently used first out.

    `clock` returns seconds (monotonic by default); tests pass their own.
    """

    def __init__(
        self,
        ttl_s: float,
        *,
        max_size: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if ttl_s <= 0:
            raise ValueError("ttl_s must be positive")
        if max_size < 1:
            raise ValueError("max_size must be at least 1")
        self.ttl_s = ttl_s
        self.max_size = max_size
        self._clock = clock
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()

    def get(self, key: K) -> V | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        expires_at, value = entry
        if self._clock() >= expires_at:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return value

    def set(self, key: K, value: V) -> None:
        self._entries[key] = (self._clock() + self.ttl_s, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_size:
            self._entries.popitem(last=False)

    def invalidate(self, key: K) -> bool:
        """Drops the entry; True when there was one (expired or not)."""
        return self._entries.pop(key, None) is not None

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        """Entries held, expired ones not yet evicted included."""
        return len(self._entries)


class GatewayCaches(Generic[P, U]):
    """The bot's persona-state cache and user cache, and who else to tell on an invalidation."""

    def __init__(self, persona_state: TTLCache[str, P], user: TTLCache[str, U]) -> None:
        self.persona_state = persona_state
        self.user = user
        self._listeners: list[InvalidationListener] = []
        # How many times everything was dropped: a load that began before the last `clear`
        # may hold what a missed invalidation named.
        self.generation = 0

    @classmethod
    def from_settings(
        cls, settings: Settings, *, clock: Callable[[], float] = time.monotonic
    ) -> GatewayCaches[Any, Any]:
        return cls(
            TTLCache(settings.persona_cache_ttl_s, clock=clock),
            TTLCache(settings.user_cache_ttl_s, clock=clock),
        )

    def add_listener(self, listener: InvalidationListener) -> None:
        """Called with (cache, key) on each invalidation, e.g. for caches the bot keeps itself."""
        self._listeners.append(listener)

    def invalidate(self, cache: CacheName, key: str) -> bool:
        """Drops the named entry; True when this process held it."""
        target: TTLCache[str, Any] = self.persona_state if cache == "persona_state" else self.user
        dropped = target.invalidate(key)
        for listener in self._listeners:
            try:
                listener(cache, key)
            except Exception:
                log.exception("cache.listener_failed", cache=cache, key=key)
        return dropped

    def clear(self) -> None:
        """Drops every entry of both caches: invalidations may have been missed meanwhile."""
        self.persona_state.clear()
        self.user.clear()
        self.generation += 1


def instance_name() -> str:
    """A name for this process's cache queue: host, pid and a random part."""
    host = "".join(c if c.isalnum() or c in "-_" else "-" for c in socket.gethostname())
    return f"{host or 'host'}-{os.getpid()}-{secrets.token_hex(4)}"


class CacheInvalidationConsumer(EventConsumer):
    """Consumes this process's cache queue and drops the entry each message names."""

    log_prefix = "cache"
    accepts = (CacheInvalidate,)

    def __init__(
        self,
        channel: AbstractChannel,
        topology: Topology,
        caches: GatewayCaches[Any, Any],
        instance: str,
        *,
        metrics: GatewayMetrics | None = None,
    ) -> None:
        super().__init__(channel, topology, metrics)
        self._caches = caches
        self.instance = instance

    @property
    def queue_name(self) -> str:
        return self._topology.cache_queue(self.instance)

    async def start(self) -> None:
        await self._consume(await declare_cache_queue(self._channel, self._topology, self.instance))
        log.info("cache.consuming", queue=self.queue_name)

    async def _handle(self, event: Event, message: AbstractIncomingMessage) -> Outcome:
        assert isinstance(event, CacheInvalidate)
        dropped = self._caches.invalidate(event.cache, event.key)
        self._metrics.cache_invalidations.labels(event.cache, str(dropped).lower()).inc()
        log.info(
            "cache.invalidated",
            tool_call_id=event.tool_call_id,
            event_id=str(event.event_id),
            cache=event.cache,
            key=event.key,
            held=dropped,
        )
        return Outcome.HANDLED
