"""The outbox sweep: publishes what a crash or a lost broker left unpublished, purges the old."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Final

import structlog

from contracts import shard_of_routing_key
from infra.cancellation import being_cancelled
from infra.observability.logs import error_summary, get_logger
from infra.settings import Settings
from worker.adapters.metrics import WorkerMetrics
from worker.core.outgoing import OutboxRow
from worker.runtime.connection import Links
from worker.runtime.ports import Outbox, ReplyQueues

__all__ = ["OutboxRelay"]

log = get_logger("ltm.worker")

_SWEEP_BATCH: Final = 500
# Rows younger than this are being published by the worker that wrote them.
_SWEEP_MIN_AGE_S: Final = 5.0


class OutboxRelay:
    """Sweeps the outbox every `LTM_OUTBOX_SWEEP_INTERVAL_S` while the worker runs."""

    def __init__(
        self, settings: Settings, outbox: Outbox, links: Links, metrics: WorkerMetrics
    ) -> None:
        self._settings = settings
        self._outbox = outbox
        self._links = links
        self._metrics = metrics

    async def sweep_forever(self) -> None:
        purge_every = max(60.0, self._settings.outbox_sweep_interval_s)
        last_purge = time.monotonic()
        while True:
            await asyncio.sleep(self._settings.outbox_sweep_interval_s)
            try:
                await self.sweep(min_age_s=_SWEEP_MIN_AGE_S)
                self._metrics.outbox_backlog.set(await self._outbox.backlog())
                if time.monotonic() - last_purge > purge_every:
                    last_purge = time.monotonic()
                    await self._outbox.purge_published(age_s=self._settings.outbox_retention_s)
            except asyncio.CancelledError:
                if being_cancelled():
                    raise
                # aiormq cancels what waits on a connection it gave up (a shard queue's
                # declaration, a confirm): the sweep goes on, as after any lost connection.
                log.warning("worker.outbox_sweep_failed", error="the broker connection was lost")
            except Exception as error:
                log.warning("worker.outbox_sweep_failed", error=error_summary(error))

    async def sweep(self, *, min_age_s: float) -> int:
        """Publishes rows a crash or a lost broker left behind; returns how many it handled."""
        publisher, shard_queues = self._links.publisher, self._links.shard_queues
        if publisher is None or shard_queues is None or publisher.closed:
            return 0
        handled = 0
        while True:
            async with self._outbox.unpublished(
                limit=_SWEEP_BATCH, min_age_s=min_age_s
            ) as unpublished:
                rows = unpublished.rows
                if not rows:
                    return handled
                # An expired reply is stale news for the shard; it is dropped, not sent.
                live = [row for row in rows if row.ttl_ms is None or row.ttl_ms > 0]
                await _declare_shards_of(live, shard_queues)
                await publisher.publish_rows(live)
                await unpublished.mark_published()
            handled += len(rows)
            self._metrics.outbox_swept.inc(len(live))
            log.info("worker.outbox_swept", published=len(live), expired=len(rows) - len(live))

    async def flush(self) -> None:
        """Everything unpublished, whatever its age: at shutdown."""
        try:
            await self.sweep(min_age_s=0)
        except Exception as error:
            log.warning("worker.outbox_flush_failed", error=error_summary(error))


async def _declare_shards_of(rows: Sequence[OutboxRow], shard_queues: ReplyQueues) -> None:
    """The queues of the shards these rows go to: after a restart, the sweep may be the first
    to send replies to a shard."""
    for row in rows:
        shard_id = shard_of_routing_key(row.routing_key)
        if shard_id is not None:
            with structlog.contextvars.bound_contextvars(tool_call_id=row.correlation_id):
                await shard_queues.ensure(shard_id)
