"""A data request through the worker: refused or run (an export, an erasure), answered,
recorded, its events queued and published, each request alone (never in a tool-call batch).

The answer and every event go through the outbox, committed with the work, then published
as a call's are; a repeated `request_id` changes nothing and answers the stored answer again,
to the repeated request's own context. An erasure first filters the dead-letter queue (the
letters removed are recorded before they are acked), then erases every store in one
transaction (`worker.adapters.data_rights`). Each transaction runs within the database budget.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import aiormq

from contracts import DataRequestCompleted, DataRequestRequested, result_routing_key
from contracts.data_requests import RefusalReason
from infra.observability.logs import get_logger
from infra.settings import Settings
from worker import failpoints
from worker.adapters.data_rights import DataRightsStore, DataRightsTransaction
from worker.adapters.dead_letter_filter import filtered_dead_letters
from worker.batching import GroupCommit
from worker.core.data_requests import (
    answer_again,
    completed,
    done_events,
    letter_digest,
    letter_is_about,
    refusal_of,
    refused_events,
)
from worker.core.outgoing import OutboxRow
from worker.runtime.connection import Links
from worker.runtime.retry import is_transient_database_fault, within_budget

__all__ = ["Answered", "DataRequestFailed", "DataRequests"]

log = get_logger("ltm.worker")

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Answered:
    """A request's answer, and the rows committed with it (none for a repeat)."""

    answer: DataRequestCompleted
    outbox: list[OutboxRow]
    replayed: bool = False


class DataRequestFailed(Exception):
    """The request's database work failed for good: it is dead-lettered with `reason`."""

    def __init__(self, reason: str, cause: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.cause = cause


class DataRequests:
    """Runs the data requests the delivery handler hands over (`answer`), and publishes what
    they committed."""

    def __init__(
        self,
        settings: Settings,
        store: DataRightsStore,
        links: Links,
        published: GroupCommit[uuid.UUID],
    ) -> None:
        self._settings = settings
        self._store = store
        self._links = links
        self._published = published
        self._reply_ttl_ms = settings.reply_ttl_s * 1000

    async def answer(self, request: DataRequestRequested, *, publisher_user_id: str | None) -> None:
        """Runs the request and publishes its answer and events; raises when the database
        stayed away beyond the budget, or a publish failed (the delivery goes back)."""
        refused = refusal_of(
            request,
            publisher_user_id=publisher_user_id,
            trusted_publishers=self._settings.trusted_publishers,
            operator_user=self._settings.broker_operator_user,
        )
        try:
            if refused is None and request.kind == "erase":
                await self._filter_dead_letters(request)
            answered = await self._retried(lambda: self._run(request, refused))
        except Exception as error:
            if is_transient_database_fault(error):
                log.error("worker.db_unavailable", error=repr(error))
                raise DataRequestFailed(f"database unavailable: {error!r}", "db_error") from error
            if _from_the_broker(error):
                raise  # the dead-letter queue could not be read: the request comes again
            log.exception("worker.data_request_failed")
            raise DataRequestFailed(f"internal error: {error!r}", "internal_error") from error
        failpoints.reach("after_commit")
        await self._publish(request, answered)
        log.info(
            "worker.data_request_answered",
            request_id=request.request_id,
            kind=request.kind,
            subject_kind=request.subject.kind,
            status=answered.answer.status,
            reason=answered.answer.reason,
            replayed=answered.replayed,
        )

    async def _retried(self, attempt: Callable[[], Awaitable[T]]) -> T:
        return await within_budget(
            attempt,
            retried=is_transient_database_fault,
            budget_s=self._settings.db_retry_seconds,
            on_retry=lambda error: log.warning("worker.db_retrying", error=repr(error)),
        )

    async def _filter_dead_letters(self, request: DataRequestRequested) -> None:
        """The subject's dead letters out of the queue, recorded before they are acked."""
        connection = self._links.connection
        assert connection is not None
        memory_ids = await self._retried(lambda: self._store.erased_memory_ids(request))
        async with filtered_dead_letters(
            connection,
            self._settings.topology,
            lambda body: letter_is_about(body, request.subject, memory_ids),
            own_user=self._settings.amqp_user,
        ) as removed:
            digests = [letter_digest(body) for body in removed]
            await self._retried(lambda: self._store.note_removed_letters(request, digests))
        failpoints.reach("after_dead_letters")

    async def _run(self, request: DataRequestRequested, refused: RefusalReason | None) -> Answered:
        async with self._store.transaction() as tx:
            stored = await tx.stored(request.request_id)
            if stored is not None:
                document = await tx.export(request) if request.kind == "export" else None
                again = answer_again(
                    request,
                    status=stored.status,
                    reason=stored.reason,
                    receipt=stored.receipt,
                    document=document if stored.status == "done" else None,
                )
                return Answered(again, [], replayed=True)
            if refused is not None:
                answer = completed(request, reason=refused)
                await tx.record(request, reason=answer.reason, receipt=None)
                return Answered(
                    answer, await tx.queue(refused_events(request, answer, self._reply_ttl_ms))
                )
            if request.kind == "export":
                answer = completed(request, document=await tx.export(request))
                await tx.record(request, reason=None, receipt=None)
                return Answered(
                    answer,
                    await tx.queue(done_events(request, answer, reply_ttl_ms=self._reply_ttl_ms)),
                )
            return await self._erase(request, tx)

    async def _erase(self, request: DataRequestRequested, tx: DataRightsTransaction) -> Answered:
        erased = await tx.erase(request)
        receipt = erased.counts.receipt(
            dead_letters_removed=await tx.removed_letters(request.request_id),
            notices_to_retract=len(erased.notices),
        )
        answer = completed(request, receipt=receipt)
        await tx.record(request, reason=None, receipt=receipt)
        events = done_events(
            request,
            answer,
            invalidated_users=erased.invalidated_users,
            invalidated_servers=erased.invalidated_servers,
            notices=erased.notices,
            reply_ttl_ms=self._reply_ttl_ms,
        )
        return Answered(answer, await tx.queue(events))

    async def _publish(self, request: DataRequestRequested, answered: Answered) -> None:
        publisher, shard_queues = self._links.both()
        context = request.context
        if context is not None:
            await shard_queues.ensure(context.shard_id)
        if answered.replayed:
            if context is not None:
                await publisher.publish_event(
                    answered.answer,
                    result_routing_key(context.shard_id),
                    self._reply_ttl_ms,
                    replayed=True,
                )
            return
        await publisher.publish_rows(answered.outbox, in_call=True)
        failpoints.reach("after_publish")
        if answered.outbox:
            try:
                await self._published.submit([row.event_id for row in answered.outbox])
            except Exception as error:
                log.warning("worker.outbox_mark_failed", error=repr(error))


def _from_the_broker(error: Exception) -> bool:
    """A fault of the broker connection (the dead-letter pass), not of the request."""
    return isinstance(error, aiormq.exceptions.AMQPError | OSError | RuntimeError)
