"""Data requests of operators: an export or an erasure published as the bot publishes one,
with `requested_by` `{"kind": "operator", "id": "cli:<login>"}` (`console:<name>` from the
console), and its answer awaited; the rows of `data_requests`; and the erasures answered since a
time asked again (after a backup taken before them was restored). The use cases behind
`ltm user export|forget`, `ltm server forget`, `ltm data-requests list|replay` and the console's
Data requests page.

The request is published `mandatory`, with confirms, as the operators' broker user; its answer
comes on the shard its context names (`ANSWER_SHARD`, which no gateway runs), to a private
queue bound to that shard's results.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from sqlalchemy import text

from contracts import (
    DATA_REQUEST_ROUTING_KEY,
    DataRequestCompleted,
    DataRequestRequested,
    Event,
    SubjectErased,
)
from contracts.data_requests import RequestContext, RequestedBy, RequestKind, Subject
from infra.settings import Settings
from operators.audit_reading import read_audit
from operators.audit_stream import AuditDelivery
from operators.engines import one_shot_engine
from operators.tool_call import awaiting_answer, publish_mandatory

__all__ = [
    "ANSWER_SHARD",
    "DEFAULT_TIMEOUT_S",
    "erasures_since",
    "list_data_requests",
    "operator_request",
    "request_data",
]

# The shard an operator's requests name: the answer goes to its results, where the command's
# own queue takes a copy. No gateway runs it: the answer lasts there only its time to live.
ANSWER_SHARD: Final = 1_000_000
# Where the answer's context says it is about (no channel: an operator's command).
_ANSWER_CONTEXT: Final = RequestContext(shard_id=ANSWER_SHARD, channel_id="0")
# An erasure rewrites every store of its subject; an export reads them.
DEFAULT_TIMEOUT_S: Final = 60.0

_ROWS: Final = text(
    """
    SELECT request_id, kind, subject_kind, subject_id, requested_by_kind, requested_by_id,
           reason, received_at, completed_at, status, receipt, strict, keep_learning,
           stated_reason, cardinality(removed_letters) AS dead_letters_removed
    FROM data_requests ORDER BY received_at DESC, request_id
    """
)
_RETRACT_ERRORS: Final = text(
    "SELECT memory_id, channel_id, message_id, retract_error FROM posted_notices"
    " WHERE retract_error IS NOT NULL ORDER BY posted_at"
)


def operator_request(
    kind: RequestKind,
    subject: Subject,
    operator: str,
    *,
    strict: bool = False,
    keep_learning: bool = False,
    deleted_account: bool = False,
    stated_reason: str | None = None,
    request_id: str | None = None,
) -> DataRequestRequested:
    """A request of an operator (`operator`: `cli:<login>` or `console:<name>`), or, with
    `deleted_account`, one for an account that no longer exists (kind
    `discord_deleted_user`, the subject's own id). `stated_reason`: the operator's words."""
    requested_by = (
        RequestedBy(kind="discord_deleted_user", id=subject.id)
        if deleted_account
        else RequestedBy(kind="operator", id=operator)
    )
    return DataRequestRequested(
        request_id=request_id or f"{operator.partition(':')[0]}-{uuid.uuid4()}",
        kind=kind,
        subject=subject,
        requested_by=requested_by,
        strict=strict,
        keep_learning=keep_learning,
        stated_reason=stated_reason,
        context=_ANSWER_CONTEXT,
    )


async def request_data(
    settings: Settings, request: DataRequestRequested, *, timeout: float = DEFAULT_TIMEOUT_S
) -> DataRequestCompleted:
    """Publishes `request` (which names a context: the answer goes there) and returns its
    answer. Raises `Unroutable` when no queue takes data requests, `ChannelNotFoundEntity`
    without the topology, `TimeoutError` when no answer came within `timeout` seconds, and
    the broker's errors when it is away."""
    if request.context is None:
        raise ValueError("a request without a context is never answered")
    async with awaiting_answer(
        settings,
        shard_id=request.context.shard_id,
        correlation_id=request.request_id,
        read=_completed,
        queue=settings.topology.operator_queue(uuid.uuid4().hex),
    ) as (tool_calls, answered):
        await publish_mandatory(
            tool_calls, request, DATA_REQUEST_ROUTING_KEY, user_id=settings.amqp_user
        )
        return await asyncio.wait_for(answered, timeout)


def _completed(event: Event, _headers: Mapping[str, Any]) -> DataRequestCompleted | None:
    return event if isinstance(event, DataRequestCompleted) else None


async def list_data_requests(settings: Settings) -> tuple[list[dict[str, Any]], list[Any]]:
    """The rows of `data_requests`, newest first, keyed by column; and the notices whose
    retraction failed (`retract_error`)."""
    async with one_shot_engine(settings) as engine, engine.connect() as connection:
        rows = [dict(row._mapping) for row in await connection.execute(_ROWS)]
        errors = list(await connection.execute(_RETRACT_ERRORS))
    return rows, errors


async def erasures_since(settings: Settings, since: datetime) -> list[DataRequestRequested]:
    """The erasures the audit stream says were done since `since`, as requests to run again
    (their own ids: a database restored from before them has no record of them)."""
    found: list[SubjectErased] = []

    async def collect(deliveries: Sequence[AuditDelivery]) -> None:
        found.extend(
            delivery.event for delivery in deliveries if isinstance(delivery.event, SubjectErased)
        )

    await read_audit(settings, since, collect, follow=False, stop=asyncio.Event())
    return _requests_of(found)


def _requests_of(erasures: Sequence[SubjectErased]) -> list[DataRequestRequested]:
    requests: dict[str, DataRequestRequested] = {}
    for erased in erasures:
        subject = (
            Subject(user_id=erased.subject_id)
            if erased.subject_kind == "user"
            else Subject(guild_id=erased.subject_id)
        )
        requests.setdefault(
            erased.request_id,
            DataRequestRequested(
                request_id=erased.request_id,
                kind="erase",
                subject=subject,
                requested_by=erased.requested_by,
                strict=erased.strict,
                keep_learning=erased.keep_learning,
                context=_ANSWER_CONTEXT,
            ),
        )
    return list(requests.values())
