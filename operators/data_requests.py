"""Data requests of operators: an export or an erasure published as the bot publishes one,
with `requested_by` `{"kind": "operator", "id": "cli:<login>"}`, and its answer awaited; the
rows of `data_requests`; and the erasures answered since a time asked again (after a backup
taken before them was restored). The use cases behind `ltm user export|forget`,
`ltm server forget` and `ltm data-requests list|replay`.

The request is published `mandatory`, with confirms, as the operators' broker user; its answer
comes on the shard its context names, to a private queue bound to that shard's results.
"""

from __future__ import annotations

import asyncio
import getpass
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final

import aio_pika
import aiormq
from sqlalchemy import text

from contracts import (
    DATA_REQUEST_ROUTING_KEY,
    DataRequestCompleted,
    DataRequestRequested,
    SubjectErased,
    amqp_properties,
    decode_event,
    encode_event,
    result_routing_key,
)
from contracts.data_requests import RequestContext, RequestedBy, Subject
from infra.messaging import amqp
from infra.settings import Settings
from operators.audit_reading import read_audit
from operators.audit_stream import AuditDelivery
from operators.engines import one_shot_engine

__all__ = [
    "ANSWER_SHARD",
    "DataRequestUnroutable",
    "erasures_since",
    "list_data_requests",
    "operator_request",
    "request_and_wait",
]

# The shard an operator's requests name: the answer goes to its results, where the command's
# own queue takes a copy. No gateway runs it: the answer lasts there only its time to live.
ANSWER_SHARD: Final = 1_000_000
# Where the answer's context says it is about (no channel: an operator's command).
_NO_CHANNEL: Final = "0"

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


class DataRequestUnroutable(Exception):
    """The broker returned the request: no queue is bound for `data_request`."""


def operator_request(
    kind: str,
    subject: Subject,
    *,
    source: str = "cli",
    strict: bool = False,
    keep_learning: bool = False,
    deleted_account: bool = False,
    stated_reason: str | None = None,
    request_id: str | None = None,
) -> DataRequestRequested:
    """A request of the operator logged in here (`cli:<login>`), or a deleted account's
    (`--deleted-account`: kind `discord_deleted_user`, the subject's own id)."""
    requested_by = (
        RequestedBy(kind="discord_deleted_user", id=subject.id)
        if deleted_account
        else RequestedBy(kind="operator", id=f"{source}:{getpass.getuser()}")
    )
    return DataRequestRequested(
        request_id=request_id or f"{source}-{uuid.uuid4()}",
        kind=kind,  # type: ignore[arg-type]
        subject=subject,
        requested_by=requested_by,
        strict=strict,
        keep_learning=keep_learning,
        stated_reason=stated_reason,
        context=RequestContext(shard_id=ANSWER_SHARD, channel_id=_NO_CHANNEL),
    )


async def request_and_wait(
    settings: Settings, request: DataRequestRequested, timeout: float
) -> DataRequestCompleted:
    """Publishes the request and waits for its answer. Raises `DataRequestUnroutable` when no
    queue takes it, `ChannelNotFoundEntity` without the topology, `TimeoutError` when no
    answer came within `timeout` seconds, and the broker's errors when it is away."""
    topology = settings.topology
    assert request.context is not None
    connection = await amqp.connect(settings)
    async with connection:
        channel = await connection.channel(publisher_confirms=True)
        events = await channel.get_exchange(topology.events_exchange, ensure=True)
        replies = await channel.declare_queue(
            topology.operator_queue(uuid.uuid4().hex), exclusive=True, auto_delete=True
        )
        await replies.bind(events, routing_key=result_routing_key(request.context.shard_id))
        answered: asyncio.Future[DataRequestCompleted] = asyncio.get_running_loop().create_future()

        async def on_reply(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            async with message.process():
                if message.correlation_id != request.request_id:
                    return
                event = decode_event(message.body)
                if isinstance(event, DataRequestCompleted) and not answered.done():
                    answered.set_result(event)

        await replies.consume(on_reply)
        requests = await channel.get_exchange(topology.tool_calls_exchange, ensure=True)
        confirmation = await requests.publish(
            aio_pika.Message(
                encode_event(request), **amqp_properties(request), user_id=settings.amqp_user
            ),
            routing_key=DATA_REQUEST_ROUTING_KEY,
            mandatory=True,
        )
        if not isinstance(confirmation, aiormq.spec.Basic.Ack):
            raise DataRequestUnroutable()
        return await asyncio.wait_for(answered, timeout)


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

    def collect(delivery: AuditDelivery) -> None:
        event = delivery.event
        if isinstance(event, SubjectErased) and event.occurred_at >= since:
            found.append(event)

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
                context=RequestContext(shard_id=ANSWER_SHARD, channel_id=_NO_CHANNEL),
            ),
        )
    return list(requests.values())
