"""The pipeline of tool calls: the core's decisions over the facts the database gives.

A batch of calls runs inside one transaction (`ToolCallTransaction`); what it returns is
committed by the caller, then published. Steps and their order are BEHAVIOUR.md's "The sequence".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from contracts import (
    CacheInvalidate,
    EmbedRequested,
    MemoryDeleted,
    MemoryStatus,
    MemoryUpdated,
    ResultData,
    ToolCallCompleted,
    ToolCallRequested,
    audit_routing_key,
    cache_routing_key,
    embed_routing_key,
    result_routing_key,
)
from worker.adapters.database import Answer, PlannedWrite, StoredResult, ToolCallTransaction
from worker.adapters.outbox import OutboxRow, OutgoingEvent
from worker.core.arguments import parse_arguments
from worker.core.decide import (
    check_personal_scope,
    check_server_state,
    check_target,
    forbidden,
    not_found,
    plan_write,
    success,
)
from worker.core.embed import build_embed
from worker.core.idempotency import check_same_call
from worker.core.model import (
    DirectoryMember,
    ForbiddenWrite,
    MemoryWrite,
    Rejection,
    ResolvedUser,
    ServerState,
    StoredUser,
    WrittenMemory,
)
from worker.core.people import name_of
from worker.core.resolve import resolve_target_user
from worker.core.sanitize import prepare_content

__all__ = ["Processed", "answer", "process_tool_call", "process_tool_calls"]


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


def answer(
    call: ToolCallRequested, status: MemoryStatus, message: str, data: ResultData
) -> ToolCallCompleted:
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


def _answer_from_record(call: ToolCallRequested, stored: StoredResult) -> Processed:
    """A call whose id has a record: the record's answer again, or, when the record is of a
    different call, a refusal that leaves the record as it is."""
    refused = check_same_call(call, recorded=stored.fingerprint)
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


@dataclass(frozen=True, slots=True)
class _Planned:
    """A write the core decided on, with the facts its events will need."""

    write: MemoryWrite
    state: ServerState
    directory: list[DirectoryMember]
    owner: StoredUser | None


@dataclass(frozen=True, slots=True)
class _Committed:
    """A planned write the database performed."""

    planned: _Planned
    written: WrittenMemory


async def process_tool_call(
    call: ToolCallRequested,
    tx: ToolCallTransaction,
    *,
    max_memory_length: int,
    reply_ttl_ms: int,
) -> Processed:
    [processed] = await process_tool_calls(
        [call], tx, max_memory_length=max_memory_length, reply_ttl_ms=reply_ttl_ms
    )
    return processed


async def process_tool_calls(
    calls: Sequence[ToolCallRequested],
    tx: ToolCallTransaction,
    *,
    max_memory_length: int,
    reply_ttl_ms: int,
) -> list[Processed]:
    """Several calls in one transaction, each decided and answered on its own.

    Their tool_call_ids must be distinct. Calls run in order: a later call that changes the
    same memory sees the earlier one's change, as it would in a transaction of its own. A call
    whose id has a record is answered from it, or refused when the record is of another call.
    """
    claims = await tx.claim(calls)
    directories: dict[int, list[DirectoryMember]] = {}
    decided: dict[int, Rejection | _Planned] = {}
    for position, (call, claim) in enumerate(zip(calls, claims, strict=True)):
        if claim.stored is None:
            decided[position] = await _decide(call, tx, claim.state, max_memory_length, directories)
    planned = [(p, d) for p, d in decided.items() if isinstance(d, _Planned)]
    written = await tx.apply(
        [
            PlannedWrite(
                decision.write,
                actor=calls[position].context.triggerer_id,
                tool_call_id=calls[position].tool_call_id,
            )
            for position, decision in planned
        ]
    )
    outcomes: dict[int, Rejection | _Committed] = {
        position: decision
        for position, decision in decided.items()
        if isinstance(decision, Rejection)
    }
    for (position, decision), memory in zip(planned, written, strict=True):
        if memory is None:
            participants = [p.user_id for p in calls[position].context.participants]
            in_other_scope = await tx.in_other_scope(decision.write, participant_ids=participants)
            outcomes[position] = not_found(decision.write, in_other_scope=in_other_scope)
        elif isinstance(memory, ForbiddenWrite):
            outcomes[position] = forbidden(decision.write)
        else:
            outcomes[position] = _Committed(decision, memory)

    results: dict[int, ToolCallCompleted] = {}
    answers: list[Answer] = []
    events: list[OutgoingEvent] = []
    counts: dict[int, int] = {}
    for position, outcome in sorted(outcomes.items()):
        call = calls[position]
        if isinstance(outcome, Rejection):
            result = answer(call, outcome.status, outcome.message, outcome.data)
            own = [OutgoingEvent(result, result_routing_key(call.context.shard_id), reply_ttl_ms)]
        else:
            status, message, data = success(outcome.planned.write, outcome.written)
            result = answer(call, status, message, data)
            own = _events_of(call, result, outcome, reply_ttl_ms)
        results[position] = result
        answers.append(Answer(call.tool_call_id, result.status, result.message, result.data))
        events.extend(own)
        counts[position] = len(own)
    rows = await tx.finish(answers, events) if answers else []

    # `finish` returns the rows in the order of `events`: each call's come together.
    processed: list[Processed] = []
    offset = 0
    for position, (call, claim) in enumerate(zip(calls, claims, strict=True)):
        if claim.stored is not None:
            processed.append(_answer_from_record(call, claim.stored))
            continue
        count = counts[position]
        processed.append(Processed(results[position], rows[offset : offset + count]))
        offset += count
    return processed


async def _decide(
    call: ToolCallRequested,
    tx: ToolCallTransaction,
    state: ServerState | None,
    max_memory_length: int,
    directories: dict[int, list[DirectoryMember]],
) -> Rejection | _Planned:
    """Steps 1 to 7 of BEHAVIOUR.md: the first that fails decides the result."""
    context = call.context
    arguments = parse_arguments(call.arguments)
    if isinstance(arguments, Rejection):
        return arguments
    refused = check_server_state(state, context)
    if refused is not None:
        return refused
    assert state is not None  # check_server_state refuses a missing one
    content = prepare_content(arguments.content, max_memory_length)
    if isinstance(content, Rejection):
        return content

    directory: list[DirectoryMember] = []
    owner: tuple[ResolvedUser, StoredUser] | None = None
    if arguments.target_user is not None:
        if not context.is_dm:
            if state.server_id not in directories:
                directories[state.server_id] = await tx.load_directory(state.server_id)
            directory = directories[state.server_id]
        resolution = resolve_target_user(
            arguments.target_user, context.participants, directory, is_dm=context.is_dm
        )
        target = check_target(resolution, bot_user_id=context.bot_user_id)
        if isinstance(target, Rejection):
            return target
        user = await tx.load_user(target.user_id, server_id=state.server_id)
        refused = check_personal_scope(
            target, user, context=context, directory=directory, is_delete=content == ""
        )
        if refused is not None:
            return refused
        assert user is not None  # check_personal_scope refuses an unknown user
        owner = (target, user)
    write = plan_write(arguments, content, state, owner, context=context)
    return _Planned(write, state, directory, owner[1] if owner else None)


def _events_of(
    call: ToolCallRequested, result: ToolCallCompleted, committed: _Committed, reply_ttl_ms: int
) -> list[OutgoingEvent]:
    """The result, the embed, one cache invalidation and one audit event (BEHAVIOUR.md step 9)."""
    context = call.context
    planned, written = committed.planned, committed.written
    write, state = planned.write, planned.state
    owner_name = (
        name_of(write.owner_disc_id, context.participants, planned.directory)
        if write.owner_disc_id is not None
        else None
    )
    embed = EmbedRequested(
        causation_id=call.event_id,
        tool_call_id=call.tool_call_id,
        guild_id=context.guild_id,
        channel_id=context.channel_id,
        shard_id=context.shard_id,
        kind="memory_deleted" if write.is_delete else "memory_updated",
        embed=build_embed(
            write,
            written,
            persona_nickname=state.persona_nickname,
            triggerer_name=name_of(context.triggerer_id, context.participants, planned.directory),
            owner_name=owner_name,
            personal_memories_enabled=state.personal_memories_enabled,
            owner_blacklisted=planned.owner.blacklisted_here if planned.owner else False,
        ),
    )
    # A server memory lives in the server's persona state; a personal one in its owner's.
    invalidation = CacheInvalidate(
        causation_id=call.event_id,
        cache="persona_state" if write.owner_disc_id is None else "user",
        key=write.owner_disc_id or context.server_disc_id,
        tool_call_id=call.tool_call_id,
    )
    audit_type = MemoryDeleted if write.is_delete else MemoryUpdated
    audit = audit_type(
        causation_id=call.event_id,
        tool_call_id=call.tool_call_id,
        revision_id=written.revision_id,
        scope=write.scope,
        memory_id=write.memory_id,
        guild_id=context.guild_id,
        channel_id=context.channel_id,
        owner_id=write.owner_disc_id,
        actor_id=context.triggerer_id,
        persona_id=state.persona_id,
        persona_lineage_id=written.persona_lineage_id,
        content_before=written.content_before,
        content_after=write.content,
    )
    return [
        OutgoingEvent(result, result_routing_key(context.shard_id), reply_ttl_ms),
        OutgoingEvent(embed, embed_routing_key(context.shard_id), reply_ttl_ms),
        OutgoingEvent(invalidation, cache_routing_key(invalidation.cache, invalidation.key)),
        OutgoingEvent(audit, audit_routing_key(audit.event_type.split(".")[1], write.scope)),
    ]
