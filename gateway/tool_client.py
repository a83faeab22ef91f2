"""The bot's side of a tool call: publish `tool_call.requested`, await `tool_call.completed`.

The LLM loop calls `ToolClient.call(...)` with the LLM's tool call and the message context;
it gets back what the LLM should see: `ToolCallCompleted.for_llm()`, or a clear answer when
the memory service did not answer in time or could not be reached. The answer is routed to
the shard named in the context (`result.shard.<n>`), whose consumer in this process resolves
the waiting call (`ToolClient.resolve`): a call must name a shard this process consumes.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import aio_pika
import aiormq
from aio_pika.abc import AbstractChannel, AbstractExchange

from contracts import (
    MAX_SEEN,
    Event,
    MemoryListing,
    Participant,
    ToolCallCompleted,
    ToolCallContext,
    ToolCallRequested,
    Topology,
    amqp_properties,
    encode_event,
)
from infra.cancellation import being_cancelled
from infra.messaging.confirms import ConfirmingChannel
from infra.observability import tracing
from infra.observability.logs import get_logger

__all__ = [
    "TIMEOUT_STATUS",
    "UNAVAILABLE_STATUS",
    "MessageContext",
    "ToolClient",
    "ToolClientUnavailable",
    "decode_tool_arguments",
    "seen_revisions",
    "timeout_answer",
    "unavailable_answer",
]

log = get_logger(__name__)

TIMEOUT_STATUS: Final = "memory_service_timeout"
UNAVAILABLE_STATUS: Final = "memory_service_unavailable"

Snowflakeish = int | str


def timeout_answer(timeout_s: float) -> dict[str, Any]:
    """What the LLM sees when no result came in time: the outcome is unknown, not a failure."""
    return {
        "success": False,
        "status": TIMEOUT_STATUS,
        "message": (
            f"The memory service did not answer within {timeout_s:g} seconds, so it is unknown "
            "whether the memory was changed; do not repeat the call now, and tell the user the "
            "change may still appear shortly."
        ),
    }


def unavailable_answer(reason: str) -> dict[str, Any]:
    """What the LLM sees when the request could not even be handed to the memory service."""
    return {
        "success": False,
        "status": UNAVAILABLE_STATUS,
        "message": (
            "The memory service is unavailable right now, so nothing was changed; "
            f"tell the user to try again later ({reason})."
        ),
    }


def decode_tool_arguments(arguments: Mapping[str, Any] | str | None) -> Any:
    """The LLM's arguments as JSON: a dict as is, a JSON string parsed.

    A string that is not JSON is passed on unchanged: the worker judges arguments (and answers
    `memory_update_failed_invalid_args`), so that one place decides what is valid.
    """
    if arguments is None:
        return {}
    if isinstance(arguments, str):
        text = arguments.strip()
        if not text:
            return {}
        try:
            return json.loads(text)
        except ValueError:
            return arguments
    return json.loads(json.dumps(dict(arguments)))  # plain JSON values only


@dataclass(frozen=True, slots=True)
class MessageContext:
    """Where and for whom the LLM answered; ids may be hikari snowflakes, ints or strings."""

    guild_id: Snowflakeish | None
    channel_id: Snowflakeish
    triggerer_id: Snowflakeish
    bot_user_id: Snowflakeish
    persona_id: int
    shard_id: int
    participants: Sequence[Participant] = field(default_factory=tuple)
    locale: str = "en-US"
    # From the triggerer's Discord permissions (e.g. Manage Server): under the edit policy
    # `teacher_or_manager`, a manager may change any memory of the server.
    triggerer_is_manager: bool = False
    # What the LLM was shown of memories in this conversation: the listing the reader
    # returned (`gateway.memories`), or memory id -> revision_id. An update of one of them
    # that changed since is refused with what it says now (`memory_update_failed_conflict`).
    seen: MemoryListing | Mapping[int | str, int] | None = None

    def to_contract(self) -> ToolCallContext:
        return ToolCallContext(
            guild_id=None if self.guild_id is None else str(int(self.guild_id)),
            channel_id=str(int(self.channel_id)),
            triggerer_id=str(int(self.triggerer_id)),
            bot_user_id=str(int(self.bot_user_id)),
            persona_id=self.persona_id,
            shard_id=self.shard_id,
            locale=self.locale,
            participants=tuple(self.participants),
            triggerer_is_manager=self.triggerer_is_manager,
            seen=seen_revisions(self.seen),
        )


def seen_revisions(seen: MemoryListing | Mapping[int | str, int] | None) -> dict[str, int] | None:
    """`context.seen` of what the LLM was shown: each memory's id and revision.

    A listing larger than the contract takes keeps its first entries (the server memories,
    newest first, then each person's): the others are updated as if not shown, rather than
    the whole call refused.
    """
    if seen is None:
        return None
    if isinstance(seen, MemoryListing):
        memories = [*seen.server, *(m for ms in seen.personal.values() for m in ms)]
        pairs: list[tuple[int | str, int]] = [(m.memory_id, m.revision_id) for m in memories]
    else:
        pairs = list(seen.items())
    revisions: dict[str, int] = {}
    for memory_id, revision_id in pairs:
        if len(revisions) == MAX_SEEN:
            break
        revisions.setdefault(str(int(memory_id)), revision_id)
    return revisions


class ToolClient:
    """Publishes tool calls with publisher confirms and awaits their results."""

    def __init__(
        self,
        publishing: ConfirmingChannel,
        topology: Topology,
        *,
        timeout_s: float = 30.0,
        shards: Iterable[int] | None = None,
        user_id: str | None = None,
    ) -> None:
        """`publishing`: the channel calls go out on (a new one after a refused call).

        `shards`: those whose results this process consumes; a call for another shard is
        refused, as its result would never come back here. None: not checked.

        `user_id`: the broker user of the channel's connection (`Settings.amqp_user`), set on
        every call: the broker refuses any other, so the worker can tell who published a call
        (`LTM_TRUSTED_PUBLISHERS`). None sets none.
        """
        self._publishing = publishing
        self._topology = topology
        self.user_id = user_id
        self.timeout_s = timeout_s
        self._shards: frozenset[int] | None = None if shards is None else frozenset(shards)
        # The exchange's handle on the channel it was taken from.
        self._exchange: tuple[AbstractChannel, AbstractExchange] | None = None
        self._waiting: dict[str, asyncio.Future[ToolCallCompleted]] = {}
        self._closed = False

    @property
    def publishing(self) -> ConfirmingChannel:
        """The channel the calls go out on."""
        return self._publishing

    @property
    def shards(self) -> Collection[int] | None:
        return self._shards

    def set_shards(self, shards: Iterable[int]) -> None:
        self._shards = frozenset(shards)

    @property
    def pending(self) -> int:
        return len(self._waiting)

    async def start(self) -> None:
        """The exchange must exist (`infra.messaging.topology.ensure_topology`): it is published
        to, not
        declared, since the bots' broker account may not declare it."""
        await self._exchange_on(self._publishing.channel)
        self._closed = False

    async def _exchange_on(self, channel: AbstractChannel) -> AbstractExchange:
        """The exchange's handle on `channel` (taken again once the channel is renewed)."""
        if self._exchange is None or self._exchange[0] is not channel:
            name = self._topology.tool_calls_exchange
            self._exchange = (channel, await channel.get_exchange(name, ensure=False))
        return self._exchange[1]

    def close(self) -> None:
        """Stops taking calls; calls still waiting get the unavailable answer."""
        self._closed = True
        for future in self._waiting.values():
            if not future.done():
                future.cancel()

    @staticmethod
    def build_request(
        tool_call_id: str,
        tool_name: str,
        arguments: Mapping[str, Any] | str | None,
        context: MessageContext | ToolCallContext,
    ) -> ToolCallRequested:
        contract = context.to_contract() if isinstance(context, MessageContext) else context
        return ToolCallRequested(
            tool_call_id=tool_call_id,
            tool_name=tool_name,
            arguments=decode_tool_arguments(arguments),
            context=contract,
        )

    async def call(
        self,
        tool_call_id: str,
        tool_name: str,
        arguments: Mapping[str, Any] | str | None,
        context: MessageContext | ToolCallContext,
        *,
        timeout_s: float | None = None,
    ) -> dict[str, Any]:
        """Runs one tool call; returns what the LLM should see (never raises for the service)."""
        timeout = self.timeout_s if timeout_s is None else timeout_s
        request = self.build_request(tool_call_id, tool_name, arguments, context)
        try:
            completed = await self.request(request, timeout_s=timeout)
        except TimeoutError:
            log.warning("tool_call.timed_out", tool_call_id=tool_call_id, timeout_s=timeout)
            return timeout_answer(timeout)
        except ToolClientUnavailable as error:
            log.error("tool_call.unavailable", tool_call_id=tool_call_id, reason=str(error))
            return unavailable_answer(str(error))
        return completed.for_llm()

    async def request(self, request: ToolCallRequested, *, timeout_s: float) -> ToolCallCompleted:
        """Publishes `request` and returns its result; raises `TimeoutError` or
        `ToolClientUnavailable`."""
        tool_call_id = request.tool_call_id
        shard_id = request.context.shard_id
        self._check_can_send(tool_call_id, shard_id)
        future: asyncio.Future[ToolCallCompleted] = asyncio.get_running_loop().create_future()
        self._waiting[tool_call_id] = future  # before publishing: the answer can be fast
        try:
            await self._publish(request, timeout_s=timeout_s)
            log.info(
                "tool_call.published",
                tool_call_id=tool_call_id,
                tool_name=request.tool_name,
                shard_id=shard_id,
                event_id=str(request.event_id),
            )
            try:
                return await asyncio.wait_for(future, timeout=timeout_s)
            except asyncio.CancelledError:
                if future.cancelled() and not being_cancelled():
                    raise ToolClientUnavailable("the gateway stopped") from None
                raise
        finally:
            self._waiting.pop(tool_call_id, None)
            if not future.done():
                future.cancel()

    async def _publish(self, request: ToolCallRequested, *, timeout_s: float) -> None:
        """Publishes the call, routed by its tool's name; raises `ToolClientUnavailable`."""
        await self.publish(
            request,
            routing_key=request.tool_name,
            conversation_id=request.tool_call_id,
            timeout_s=timeout_s,
            unroutable=f"no queue takes the tool {request.tool_name!r}",
        )

    async def publish(
        self,
        event: Event,
        *,
        routing_key: str,
        conversation_id: str,
        timeout_s: float,
        unroutable: str,
    ) -> None:
        """Publishes `event` to the tool-call exchange until the broker confirms, within
        `timeout_s`: one it refused (nack) goes again on the new channel
        (`infra.messaging.confirms`); raises `ToolClientUnavailable`, saying `unroutable` when
        no queue is bound for `routing_key`. Tool calls and data requests both go this way."""
        if self._closed or self._exchange is None:
            raise ToolClientUnavailable("the gateway is not running")
        deadline = time.monotonic() + timeout_s
        properties = amqp_properties(event)

        async def attempt(channel: AbstractChannel, _: aiormq.Channel) -> object:
            exchange = await self._exchange_on(channel)
            # The call's trace starts here (or continues the bot's current span): the worker,
            # and then this process's shard consumer, carry it on.
            with tracing.sending(
                exchange=exchange.name,
                routing_key=routing_key,
                message_id=properties["message_id"],
                conversation_id=conversation_id,
                headers=properties["headers"],
            ) as span:
                confirmation = await exchange.publish(
                    aio_pika.Message(encode_event(event), **properties, user_id=self.user_id),
                    routing_key=routing_key,
                    mandatory=True,
                    timeout=max(deadline - time.monotonic(), 0.001),
                )
                if not isinstance(confirmation, aiormq.spec.Basic.Ack):
                    tracing.failed(span, "unroutable", unroutable)
            return confirmation

        try:
            confirmation = await self._publishing.confirmed(attempt, within_s=timeout_s)
        except TimeoutError:
            raise ToolClientUnavailable("the broker did not confirm the call") from None
        except aiormq.exceptions.DeliveryError:
            raise ToolClientUnavailable("the broker refused the call (nack)") from None
        except asyncio.CancelledError:
            if being_cancelled():
                raise
            raise ToolClientUnavailable("the broker connection stalled") from None
        except Exception as error:
            raise ToolClientUnavailable(f"publishing failed: {error!r}") from error
        if not isinstance(confirmation, aiormq.spec.Basic.Ack):
            # Returned unroutable (no worker queue bound for this key): nobody will answer.
            raise ToolClientUnavailable(unroutable)

    def _check_can_send(self, tool_call_id: str, shard_id: int) -> None:
        """Raises `ToolClientUnavailable` when this call cannot be sent from here."""
        if self._closed or self._exchange is None:
            raise ToolClientUnavailable("the gateway is not running")
        if self._shards is not None and shard_id not in self._shards:
            raise ToolClientUnavailable(f"shard {shard_id} is not consumed by this process")
        if tool_call_id in self._waiting:
            raise ToolClientUnavailable(f"tool call {tool_call_id!r} is already waiting")

    def resolve(self, completed: ToolCallCompleted) -> bool:
        """Hands a result to its waiting call; False when no call here waits for it."""
        future = self._waiting.get(completed.tool_call_id)
        if future is None or future.done():
            log.info(
                "tool_call.result_without_waiter",
                tool_call_id=completed.tool_call_id,
                status=completed.status.value,
            )
            return False
        future.set_result(completed)
        log.info(
            "tool_call.completed",
            tool_call_id=completed.tool_call_id,
            status=completed.status.value,
        )
        return True


class ToolClientUnavailable(RuntimeError):
    """The call could not be handed to the memory service (not running, publish failed)."""
