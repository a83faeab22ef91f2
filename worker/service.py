"""The pipeline of tool calls: one transaction for a batch, each call run by its tool's pipeline.

A batch runs inside one transaction (`ToolCallTransaction`): the inbox rows are claimed
together, each tool's calls go to its pipeline (`worker.tools.registry`), and every result and
event is queued in the outbox with one statement, sent with COMMIT. What it returns is
committed by the caller, then published.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from contracts import ToolCallCompleted, ToolCallRequested
from worker.core.idempotency import check_same_call
from worker.core.outgoing import OutboxRow
from worker.core.records import Answer, StoredResult
from worker.ports import ToolCallTransaction
from worker.tools.base import (
    DEFAULT_MEMORY_LIMIT,
    ClaimedCall,
    Outcome,
    PipelineSettings,
    ToolPipeline,
    answer,
)
from worker.tools.registry import PIPELINES, pipeline_for

__all__ = ["Processed", "process_tool_call", "process_tool_calls"]


@dataclass(frozen=True, slots=True)
class Processed:
    """The result, and the outbox rows to publish once the transaction commits.

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


def _answer_from_record(
    call: ToolCallRequested, stored: StoredResult, pipeline: ToolPipeline
) -> Processed:
    """A call whose id has a record: the record's answer again, or, when the record is of a
    different call, a refusal in the call's own tool's family that leaves the record as it is."""
    refused = check_same_call(
        call, recorded=stored.fingerprint, invalid_args=pipeline.statuses.invalid_args
    )
    if refused is not None:
        # Answered to this call's own caller: the record's caller got its answer.
        result = answer(call, refused.status, refused.message, refused.data)
        return Processed(result=result, outbox=[], reused_id=True)
    # Routed as the original call was, so that a bot still waiting for it gets its answer.
    again = answer(call, stored.status, stored.message, stored.data).model_copy(
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
    settings = PipelineSettings(
        max_memory_length=max_memory_length,
        reply_ttl_ms=reply_ttl_ms,
        max_server_memories=max_server_memories,
        max_personal_memories=max_personal_memories,
    )
    pipelines = [_pipeline(call) for call in calls]
    claims = await tx.inbox.claim(calls)
    outcomes: dict[int, Outcome] = {}
    # By pipeline, not by name (a tool's old name shares its calls' run), in the registry's
    # order, whatever order the calls came in.
    for pipeline in PIPELINES:
        positions = [
            position
            for position, claim in enumerate(claims)
            if claim.stored is None and pipelines[position] is pipeline
        ]
        if positions:
            claimed = [ClaimedCall(calls[p], claims[p].state) for p in positions]
            ran = await pipeline.run(claimed, tx, settings)
            outcomes.update(zip(positions, ran, strict=True))

    answers = [
        Answer(calls[p].tool_call_id, o.result.status, o.result.message, o.result.data)
        for p, o in sorted(outcomes.items())
    ]
    events = [event for _, outcome in sorted(outcomes.items()) for event in outcome.events]
    rows = await tx.inbox.finish(answers, events) if answers else []

    # `finish` returns the rows in the order of `events`: each call's come together.
    processed: list[Processed] = []
    offset = 0
    for position, (call, claim) in enumerate(zip(calls, claims, strict=True)):
        if claim.stored is not None:
            processed.append(_answer_from_record(call, claim.stored, pipelines[position]))
            continue
        outcome = outcomes[position]
        count = len(outcome.events)
        processed.append(Processed(outcome.result, rows[offset : offset + count]))
        offset += count
    return processed


def _pipeline(call: ToolCallRequested) -> ToolPipeline:
    pipeline = pipeline_for(call.tool_name)
    if pipeline is None:
        raise LookupError(f"no pipeline for tool {call.tool_name!r}")
    return pipeline
