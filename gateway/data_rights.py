"""The bot's side of a data request: a user's export or erasure, asked for by the user, and
a server's erasure when the bot is removed from it.

`await gateway.data_rights.export(user_id, context)` and `await
gateway.data_rights.forget(user_id, context, strict=False, keep_learning=False)` publish a
`data_request.requested` of kind `user` (the user asks about themselves), for a bot's
`/memory export` and `/memory forget-me`, and return its `data_request.completed`: routed to
the shard of `context` (`result.shard.<n>`), whose consumer in this process hands it over
(`DataRights.resolve`). Publishing goes the tool calls' way (`ToolClient.publish`: confirms,
the broker user set); an answer that does not come in time raises `TimeoutError`, a request
that cannot be handed over `ToolClientUnavailable`, as a tool call's would.
"""

from __future__ import annotations

import asyncio
import uuid

from contracts import (
    DATA_REQUEST_ROUTING_KEY,
    DataRequestCompleted,
    DataRequestRequested,
    RequestContext,
    RequestedBy,
    Subject,
)
from gateway.tool_client import MessageContext, ToolClient, ToolClientUnavailable
from infra.cancellation import being_cancelled
from infra.observability.logs import get_logger

__all__ = ["DataRights"]

log = get_logger(__name__)

# The answer of an export reads every store of the user; an erasure rewrites them.
DEFAULT_TIMEOUT_S = 60.0


def _request_context(context: MessageContext | RequestContext) -> RequestContext:
    if isinstance(context, RequestContext):
        return context
    return RequestContext(shard_id=context.shard_id, channel_id=str(int(context.channel_id)))


class DataRights:
    """Publishes data requests over the tool client's channel and awaits their answers."""

    def __init__(self, tool_client: ToolClient, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self._tool_client = tool_client
        self.timeout_s = timeout_s
        self._waiting: dict[str, asyncio.Future[DataRequestCompleted]] = {}

    async def export(
        self,
        user_id: int | str,
        context: MessageContext | RequestContext,
        *,
        timeout_s: float | None = None,
    ) -> DataRequestCompleted:
        """Everything the service holds about the user: the answer's `document`."""
        return await self.request(self._by_user("export", user_id, context), timeout_s=timeout_s)

    async def forget(
        self,
        user_id: int | str,
        context: MessageContext | RequestContext,
        strict: bool = False,
        keep_learning: bool = False,
        *,
        timeout_s: float | None = None,
    ) -> DataRequestCompleted:
        """Erases the user (`strict`: the server memories they taught too; `keep_learning`:
        their privacy level stays as it was): the answer's `receipt` counts what went."""
        request = self._by_user("erase", user_id, context, strict, keep_learning)
        return await self.request(request, timeout_s=timeout_s)

    @staticmethod
    def _by_user(
        kind: str,
        user_id: int | str,
        context: MessageContext | RequestContext,
        strict: bool = False,
        keep_learning: bool = False,
    ) -> DataRequestRequested:
        user = str(int(user_id))
        return DataRequestRequested.model_validate(
            {
                "request_id": f"user-{uuid.uuid4()}",
                "kind": kind,
                "subject": Subject(user_id=user),
                "requested_by": RequestedBy(kind="user", id=user),
                "strict": strict,
                "keep_learning": keep_learning,
                "context": _request_context(context),
            }
        )

    async def request(
        self, request: DataRequestRequested, *, timeout_s: float | None = None
    ) -> DataRequestCompleted:
        """Publishes `request` (which names a context) and returns its answer; raises
        `TimeoutError` or `ToolClientUnavailable`."""
        if request.context is None:
            raise ValueError("a request without a context gets no answer: use submit")
        timeout = self.timeout_s if timeout_s is None else timeout_s
        shards = self._tool_client.shards
        if shards is not None and request.context.shard_id not in shards:
            raise ToolClientUnavailable(
                f"shard {request.context.shard_id} is not consumed by this process"
            )
        if request.request_id in self._waiting:
            raise ToolClientUnavailable(f"request {request.request_id!r} is already waiting")
        future: asyncio.Future[DataRequestCompleted] = asyncio.get_running_loop().create_future()
        self._waiting[request.request_id] = future  # before publishing: the answer can be fast
        try:
            await self.submit(request, timeout_s=timeout)
            try:
                return await asyncio.wait_for(future, timeout=timeout)
            except TimeoutError:
                log.warning(
                    "data_request.timed_out", request_id=request.request_id, timeout_s=timeout
                )
                raise
            except asyncio.CancelledError:
                if future.cancelled() and not being_cancelled():
                    raise ToolClientUnavailable("the gateway stopped") from None
                raise
        finally:
            self._waiting.pop(request.request_id, None)
            if not future.done():
                future.cancel()

    async def submit(
        self, request: DataRequestRequested, *, timeout_s: float | None = None
    ) -> None:
        """Publishes `request` without waiting for its answer (one of context null is only
        recorded by the worker); raises `ToolClientUnavailable`."""
        await self._tool_client.publish(
            request,
            routing_key=DATA_REQUEST_ROUTING_KEY,
            conversation_id=request.request_id,
            timeout_s=self.timeout_s if timeout_s is None else timeout_s,
            unroutable="no queue takes data requests",
        )
        log.info(
            "data_request.published",
            request_id=request.request_id,
            kind=request.kind,
            subject_kind=request.subject.kind,
            requested_by=request.requested_by.kind,
        )

    async def forget_removed_server(self, guild_id: int | str, instance: str) -> str:
        """Asks for the erasure of a server the bot was removed from (`bot_removed`, named
        by this gateway's instance); nobody waits for the answer. Returns the request id."""
        request = DataRequestRequested(
            request_id=f"bot_removed-{uuid.uuid4()}",
            kind="erase",
            subject=Subject(guild_id=str(int(guild_id))),
            requested_by=RequestedBy(kind="bot_removed", id=instance),
            context=None,
        )
        await self.submit(request)
        return request.request_id

    def resolve(self, completed: DataRequestCompleted) -> bool:
        """Hands an answer to its waiting request; False when none here waits for it."""
        future = self._waiting.get(completed.request_id)
        if future is None or future.done():
            log.info("data_request.answer_without_waiter", request_id=completed.request_id)
            return False
        future.set_result(completed)
        log.info(
            "data_request.completed",
            request_id=completed.request_id,
            status=completed.status,
            reason=completed.reason,
        )
        return True

    def close(self) -> None:
        """Requests still waiting end with `ToolClientUnavailable`."""
        for future in self._waiting.values():
            if not future.done():
                future.cancel()
