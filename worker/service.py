"""A batch of tool calls in one transaction, each call run by its tool.

A batch runs inside one transaction (`ToolCallTransaction`): the inbox rows are claimed
together, each tool's calls go to that tool (`worker.tools.registry`), and every result and
event is queued in the outbox with one statement, sent with COMMIT. What it returns is
committed by the caller, then published.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from contracts import ToolCallCompleted, ToolCallRequested
from worker.core.idempotency import check_same_call
from worker.core.outgoing import OutboxRow
from worker.core.records import StoredResult
from worker.ports import ToolCallTransaction
from worker.tools.base import (
    DEFAULT_MEMORY_LIMIT,
    ClaimedCall,
    ResultAndEvents,
    Tool,
    ToolSettings,
    result_for,
)
from worker.tools.registry import TOOLS_IN_ORDER, tool_for

__all__ = ["Processed", "process_tool_call", "process_tool_calls"]


@dataclass(frozen=True, slots=True)
class Processed:
    """A call as the batch left it: its result, and the outbox rows to publish once the
    transaction commits.

    `replayed`: the call was answered before; `result` repeats that answer.
    `reused_id`: the call's id has the record of a different call; `result` refuses it.
    Nothing is written for either, so their result is published directly: a redelivery
    finds the same record and answers the same way.
    """

    result: ToolCallCompleted
    outbox: list[OutboxRow]
    replayed: bool = False
    reused_id: bool = False

    @property
    def written(self) -> bool:
        """Whether the transaction recorded the call, its result going out with its rows."""
        return not (self.replayed or self.reused_id)


def _result_from_record(call: ToolCallRequested, stored: StoredResult, tool: Tool) -> Processed:
    """A call whose id has a record: the record's result again, or, when the record is of a
    different call, a refusal in the call's own tool's family that leaves the record as it is."""
    refused = check_same_call(
        call, recorded=stored.fingerprint, invalid_args=tool.statuses.invalid_args
    )
    if refused is not None:
        # Answered to this call's own caller: the record's caller got its result.
        result = result_for(call, refused.status, refused.message, refused.data)
        return Processed(result=result, outbox=[], reused_id=True)
    # Routed as the original call was, so that a bot still waiting for it gets its result.
    again = result_for(call, stored.status, stored.message, stored.data).model_copy(
        update={
            "tool_name": stored.tool_name,
            "guild_id": stored.guild_id,
            "channel_id": stored.channel_id,
            "shard_id": stored.shard_id,
        }
    )
    return Processed(result=again, outbox=[], replayed=True)


async def process_tool_call(
    call: ToolCallRequested,
    tx: ToolCallTransaction,
    *,
    max_memory_length: int,
    reply_ttl_ms: int,
    max_server_memories: int = DEFAULT_MEMORY_LIMIT,
    max_personal_memories: int = DEFAULT_MEMORY_LIMIT,
) -> Processed:
    [processed] = await process_tool_calls(
        [call],
        tx,
        max_memory_length=max_memory_length,
        reply_ttl_ms=reply_ttl_ms,
        max_server_memories=max_server_memories,
        max_personal_memories=max_personal_memories,
    )
    return processed


async def process_tool_calls(
    calls: Sequence[ToolCallRequested],
    tx: ToolCallTransaction,
    *,
    max_memory_length: int,
    reply_ttl_ms: int,
    max_server_memories: int = DEFAULT_MEMORY_LIMIT,
    max_personal_memories: int = DEFAULT_MEMORY_LIMIT,
) -> list[Processed]:
    """Several calls in one transaction, each decided and answered on its own.

    Their tool_call_ids must be distinct, and each tool_name one the registry knows (the
    runtime dead-letters the others before they get here). A tool's calls run in order; the
    tools one after the other in the registry's order, each once per batch. A call whose id
    has a record is answered from it, or refused when the record is of another call.
    """
    settings = ToolSettings(
        max_memory_length=max_memory_length,
        reply_ttl_ms=reply_ttl_ms,
        max_server_memories=max_server_memories,
        max_personal_memories=max_personal_memories,
    )
    tools = [_tool(call) for call in calls]
    claims = await tx.inbox.claim(calls)
    decided: dict[int, ResultAndEvents] = {}
    # By tool, not by name (a tool's old name shares its calls' run), in the registry's
    # order, whatever order the calls came in.
    for tool in TOOLS_IN_ORDER:
        positions = [
            position
            for position, claim in enumerate(claims)
            if claim.stored is None and tools[position] is tool
        ]
        if positions:
            claimed = [ClaimedCall(calls[p], claims[p].state) for p in positions]
            ran = await tool.run(claimed, tx, settings)
            decided.update(zip(positions, ran, strict=True))

    in_order = [decided[position] for position in sorted(decided)]
    results = [done.result for done in in_order]
    events = [event for done in in_order for event in done.events]
    rows = await tx.inbox.finish(results, events) if results else []

    # `finish` returns the rows in the order of `events`: each call's come together.
    processed: list[Processed] = []
    offset = 0
    for position, (call, claim) in enumerate(zip(calls, claims, strict=True)):
        if claim.stored is not None:
            processed.append(_result_from_record(call, claim.stored, tools[position]))
            continue
        done = decided[position]
        count = len(done.events)
        processed.append(Processed(done.result, rows[offset : offset + count]))
        offset += count
    return processed


def _tool(call: ToolCallRequested) -> Tool:
    tool = tool_for(call.tool_name)
    if tool is None:
        raise LookupError(f"no tool {call.tool_name!r}")
    return tool
