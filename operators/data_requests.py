"""Asking for a data request and waiting for its answer: the use case behind the console's
Data requests page and the operators' commands (`ltm user export|forget`, `ltm server
forget`).

`request_data(settings, request)` publishes a `data_request.requested` to the tool-call
exchange (routing key `data_request`, `mandatory`, with publisher confirms, the broker user
set as the bot's tool client sets it) and returns its `data_request.completed`, read from a
private copy of the results of the request's shard, as `ltm call` reads a tool call's. An
operator's request (`operator_request`) names shard 0 and no channel (`"0"`): a gateway of
that shard finds no one waiting for the answer and drops it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from typing import Any, Final

from contracts import (
    DATA_REQUEST_ROUTING_KEY,
    DataRequestCompleted,
    DataRequestRequested,
    Event,
    RequestContext,
    RequestedBy,
    Subject,
)
from contracts.data_requests import RequestKind
from infra.settings import Settings
from operators.tool_call import awaiting_answer, publish_mandatory

__all__ = ["OPERATOR_CONTEXT", "operator_request", "request_data"]

# Where an operator's answer comes back: shard 0's results, about no channel.
OPERATOR_CONTEXT: Final = RequestContext(shard_id=0, channel_id="0")
# An erasure rewrites every store of its subject; an export reads them.
DEFAULT_TIMEOUT_S: Final = 60.0


def operator_request(
    kind: RequestKind,
    subject: Subject,
    operator: str,
    *,
    strict: bool = False,
    keep_learning: bool = False,
) -> DataRequestRequested:
    """A request of an operator (`operator`: `cli:<login>` or `console:<name>`)."""
    return DataRequestRequested(
        request_id=f"operator-{uuid.uuid4()}",
        kind=kind,
        subject=subject,
        requested_by=RequestedBy(kind="operator", id=operator),
        strict=strict,
        keep_learning=keep_learning,
        context=OPERATOR_CONTEXT,
    )


async def request_data(
    settings: Settings, request: DataRequestRequested, *, timeout: float = DEFAULT_TIMEOUT_S
) -> DataRequestCompleted:
    """Publishes `request` (which names a context: the answer goes there) and returns its
    answer. Raises `Unroutable` when no queue takes data requests, `ChannelNotFoundEntity`
    without the topology, `TimeoutError` when no answer came within `timeout` seconds."""
    if request.context is None:
        raise ValueError("a request without a context is never answered")
    async with awaiting_answer(
        settings,
        shard_id=request.context.shard_id,
        correlation_id=request.request_id,
        read=_completed,
    ) as (tool_calls, answered):
        await publish_mandatory(
            tool_calls, request, DATA_REQUEST_ROUTING_KEY, user_id=settings.amqp_user
        )
        return await asyncio.wait_for(answered, timeout)


def _completed(event: Event, _headers: Mapping[str, Any]) -> DataRequestCompleted | None:
    return event if isinstance(event, DataRequestCompleted) else None
