"""A batch of calls through the tools' pipelines: one unit of work, retried within the budget."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from opentelemetry.trace import Span

from contracts import ToolCallRequested
from infra.observability import tracing
from infra.observability.logs import get_logger
from infra.settings import Settings
from infra.storage.database import database_name
from worker.adapters.metrics import WorkerMetrics
from worker.batching import GroupCommit, TakenFlush
from worker.ports import ToolCallStore
from worker.runtime.retry import retried_for, within_budget
from worker.service import Processed, process_tool_calls

__all__ = ["BatchRunner", "Submitted"]

log = get_logger("ltm.worker")


@dataclass(frozen=True, slots=True)
class Submitted:
    """A call handed to the batcher, with the span of its delivery (None: tracing off), which
    its transaction's span joins or links to."""

    call: ToolCallRequested
    span: Span | None


def _database_of(url: str) -> str | None:
    """The database the URL names, for the transaction's span; None for a URL naming none
    (libpq then takes the user's name)."""
    try:
        return database_name(url)
    except ValueError:
        return None


class BatchRunner:
    """Runs the batches the `CallBatcher` forms (`run`), each in one unit of work retried
    within `LTM_DB_RETRY_SECONDS`, marking published outbox rows of earlier calls in the
    same commit."""

    def __init__(
        self,
        settings: Settings,
        store: ToolCallStore,
        metrics: WorkerMetrics,
        published: GroupCommit[uuid.UUID],
    ) -> None:
        self._settings = settings
        self._store = store
        self._metrics = metrics
        self._published = published
        self._database = _database_of(settings.database_url)
        self._reply_ttl_ms = settings.reply_ttl_s * 1000

    async def run(self, submitted: list[Submitted]) -> list[Processed]:
        """One transaction for the batch, retried as a whole on transient faults, bounded."""
        calls = [item.call for item in submitted]
        self._metrics.batch_size.observe(len(calls))
        # Each call's events keep the context of its own delivery, batched or not.
        traceparents = {
            item.call.tool_call_id: traceparent
            for item in submitted
            if (traceparent := tracing.traceparent_of(item.span)) is not None
        }
        # Rows of earlier calls that the broker has confirmed are marked in this commit,
        # instead of in a transaction of their own.
        marks = self._published.take()
        try:
            with tracing.transaction([item.span for item in submitted], database=self._database):
                processed = await within_budget(
                    lambda: self._transaction(calls, marks, traceparents),
                    retried=retried_for(calls),
                    budget_s=self._settings.db_retry_seconds,
                    on_retry=lambda error: self._count_retry(error, calls),
                )
        except BaseException:
            if marks is not None:
                self._published.give_back(marks)
            raise
        if marks is not None:
            marks.flushed()
        return processed

    async def _transaction(
        self,
        calls: list[ToolCallRequested],
        marks: TakenFlush[uuid.UUID] | None,
        traceparents: Mapping[str, str],
    ) -> list[Processed]:
        async with self._store.transaction(traceparents) as tx:
            if marks is not None:
                await tx.outbox.mark_published(marks.ids)
            return await process_tool_calls(
                calls,
                tx,
                max_memory_length=self._settings.max_memory_length,
                reply_ttl_ms=self._reply_ttl_ms,
                max_server_memories=self._settings.max_server_memories,
                max_personal_memories=self._settings.max_personal_memories,
            )

    def _count_retry(self, error: BaseException | None, calls: list[ToolCallRequested]) -> None:
        self._metrics.db_retries.inc()
        log.warning(
            "worker.db_retrying",
            error=error,  # summarised by the log processor
            batch=len(calls),
            tool_call_ids=[call.tool_call_id for call in calls],
        )
