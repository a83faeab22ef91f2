"""What a tool is: the calls of one batch that are its own, decided inside the batch's
transaction, each answered with its result and the events that go with it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from contracts import (
    EmbedKind,
    EmbedPayload,
    EmbedRequested,
    MemoryStatus,
    ResultData,
    ToolCallCompleted,
    ToolCallRequested,
    ToolStatuses,
)
from worker.core.model import Rejection, ServerState
from worker.core.outgoing import OutgoingEvent, result_event
from worker.ports import ToolCallTransaction

__all__ = [
    "DEFAULT_MEMORY_LIMIT",
    "ClaimedCall",
    "ResultAndEvents",
    "Tool",
    "ToolSettings",
    "embed_requested",
    "refused",
    "result_for",
]


# LTM_MAX_SERVER_MEMORIES' and LTM_MAX_PERSONAL_MEMORIES' default.
DEFAULT_MEMORY_LIMIT: Final = 25


@dataclass(frozen=True, slots=True)
class ToolSettings:
    """The settings the tools decide with."""

    max_memory_length: int
    reply_ttl_ms: int
    max_server_memories: int = DEFAULT_MEMORY_LIMIT
    max_personal_memories: int = DEFAULT_MEMORY_LIMIT


@dataclass(frozen=True, slots=True)
class ClaimedCall:
    """A call whose inbox row this transaction wrote, with the server's state the claim read."""

    call: ToolCallRequested
    state: ServerState | None


@dataclass(frozen=True, slots=True)
class ResultAndEvents:
    """What a tool made of a call: its result, and every event queued with it (the result
    first). The inbox records the result, so that a second delivery repeats it."""

    result: ToolCallCompleted
    events: list[OutgoingEvent]


class Tool(Protocol):
    """One tool: its statuses, and how a batch's calls of it are decided and written."""

    @property
    def statuses(self) -> ToolStatuses: ...

    def unrecorded(self, *, database_away: bool) -> Rejection:
        """The refusal of a call that could not run: the database away past the retry budget,
        or a fault of the worker's own. Sent directly, since nothing could record it."""
        ...

    async def run(
        self,
        calls: Sequence[ClaimedCall],
        tx: ToolCallTransaction,
        settings: ToolSettings,
    ) -> list[ResultAndEvents]:
        """One result and its events per call, in order. Calls run in order: a later call sees
        what an earlier one wrote, as it would in a transaction of its own."""
        ...


def result_for(
    call: ToolCallRequested, status: MemoryStatus, message: str, data: ResultData
) -> ToolCallCompleted:
    """The result that answers `call`, routed back to where it came from."""
    context = call.context
    return ToolCallCompleted(
        causation_id=call.event_id,
        tool_call_id=call.tool_call_id,
        tool_name=call.tool_name,
        guild_id=context.guild_id,
        channel_id=context.channel_id,
        shard_id=context.shard_id,
        success=status.success,
        status=status,
        message=message,
        data=data,
    )


def embed_requested(
    call: ToolCallRequested,
    kind: EmbedKind,
    embed: EmbedPayload,
    result: ToolCallCompleted,
    owner_disc_id: str | None,
) -> EmbedRequested:
    """The embed a change shows in the channel of `call`, naming the memory of its `result`
    (and its owner, for a personal one)."""
    context = call.context
    return EmbedRequested(
        causation_id=call.event_id,
        tool_call_id=call.tool_call_id,
        guild_id=context.guild_id,
        channel_id=context.channel_id,
        shard_id=context.shard_id,
        kind=kind,
        embed=embed,
        memory_id=result.data.memory_id,
        scope=result.data.scope,
        owner_disc_id=owner_disc_id,
    )


def refused(call: ToolCallRequested, rejection: Rejection, reply_ttl_ms: int) -> ResultAndEvents:
    """A failure of the tool's steps: the result alone, no embed, invalidation or audit."""
    result = result_for(call, rejection.status, rejection.message, rejection.data)
    return ResultAndEvents(result, [result_event(result, reply_ttl_ms)])
