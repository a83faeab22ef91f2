"""What the runtime needs from the broker and the outbox, declared as protocols.

The runtime (`Worker`, the batch runner, the delivery handler, the outbox relay) is typed
against these and `worker.ports.ToolCallStore`; `worker.adapters.broker` and
`worker.adapters.outbox` implement them, the composition root (`ltm.composition`) wires the
concrete ones, and the unit tests pass fakes.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from aiormq.abc import DeliveredMessage

from contracts import Event
from worker.core.outgoing import OutboxRow

__all__ = ["Outbox", "Publisher", "ReplyQueues", "UnpublishedRows"]


class Publisher(Protocol):
    """Sends events to the broker, each confirmed, and deliveries to the dead-letter exchange."""

    @property
    def closed(self) -> bool:
        """Whether its channel is gone (the connection is being replaced)."""
        ...

    async def publish_rows(self, rows: Sequence[OutboxRow], *, in_call: bool = False) -> None:
        """The outbox rows, all confirmed when it returns; raises if any was refused.
        `in_call`: published within the span of the call that wrote them."""
        ...

    async def publish_event(
        self, event: Event, routing_key: str, ttl_ms: int | None, *, replayed: bool = False
    ) -> None:
        """An event the database could not hold (or holds already: `replayed`, an answer
        repeated from the idempotency record), straight to the broker."""
        ...

    async def dead_letter(self, message: DeliveredMessage, reason: str, *, event_id: str) -> None:
        """The delivery as it came, with why and when, to the dead-letter exchange; confirmed
        when it returns. `event_id` becomes the copy's message_id."""
        ...


class ReplyQueues(Protocol):
    """The shards' reply queues, declared before a shard's first reply."""

    async def ensure(self, shard_id: int) -> None:
        """Returns once the shard's queue is declared; at once when it was already."""
        ...


class UnpublishedRows(Protocol):
    """Outbox rows left unpublished, locked until marked (or the block ends)."""

    @property
    def rows(self) -> list[OutboxRow]: ...

    async def mark_published(self) -> None:
        """Every row of the batch, in the transaction that locked them."""
        ...


class Outbox(Protocol):
    """The outbox on transactions of its own: marks after the broker's confirm, and the sweep."""

    async def mark_published(self, event_ids: Sequence[uuid.UUID]) -> None: ...

    def unpublished(
        self, *, limit: int, min_age_s: float
    ) -> AbstractAsyncContextManager[UnpublishedRows]:
        """Locks a batch of rows older than `min_age_s` left unpublished (SKIP LOCKED)."""
        ...

    async def purge_published(self, *, age_s: float) -> int:
        """Deletes rows published longer than `age_s` ago; how many."""
        ...

    async def backlog(self) -> int:
        """How many rows wait to be published."""
        ...
