"""`update_long_term_memory`: change or delete one memory (docs/behaviour.md, update steps)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from contracts import (
    UPDATE_STATUSES,
    CacheInvalidate,
    EmbedRequested,
    MemoryDeleted,
    MemoryUpdated,
    ToolCallCompleted,
    ToolCallRequested,
    ToolStatuses,
    audit_routing_key,
    cache_routing_key,
    embed_routing_key,
    result_routing_key,
)
from worker.core import messages
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
from worker.core.outgoing import OutgoingEvent
from worker.core.people import name_of
from worker.core.records import PlannedWrite
from worker.core.resolve import resolve_target_user
from worker.core.sanitize import prepare_content
from worker.ports import ToolCallTransaction
from worker.tools.base import ClaimedCall, Outcome, PipelineSettings, answer, refused

__all__ = ["UPDATE", "UpdateMemory"]


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


@dataclass(frozen=True, slots=True)
class UpdateMemory:
    """Each call is decided on its own; the batch's writes go to the database together."""

    statuses: ToolStatuses = UPDATE_STATUSES

    def unrecorded(self, *, database_away: bool) -> Rejection:
        if database_away:
            return Rejection(self.statuses.db_error, messages.database_unavailable())
        return Rejection(self.statuses.internal_error, messages.internal_error())

    async def run(
        self,
        calls: Sequence[ClaimedCall],
        tx: ToolCallTransaction,
        settings: PipelineSettings,
    ) -> list[Outcome]:
        directories: dict[int, list[DirectoryMember]] = {}
        decided = [
            await _decide(claimed.call, tx, claimed.state, settings.max_memory_length, directories)
            for claimed in calls
        ]
        planned = [(p, d) for p, d in enumerate(decided) if isinstance(d, _Planned)]
        written = await tx.memories.apply(
            [
                PlannedWrite(
                    decision.write,
                    actor=calls[position].call.context.triggerer_id,
                    tool_call_id=calls[position].call.tool_call_id,
                )
                for position, decision in planned
            ]
        )
        outcomes: dict[int, Rejection | _Committed] = {
            position: decision
            for position, decision in enumerate(decided)
            if isinstance(decision, Rejection)
        }
        for (position, decision), memory in zip(planned, written, strict=True):
            if memory is None:
                call = calls[position].call
                participants = [p.user_id for p in call.context.participants]
                in_other_scope = await tx.memories.in_other_scope(
                    decision.write, participant_ids=participants
                )
                outcomes[position] = not_found(decision.write, in_other_scope=in_other_scope)
            elif isinstance(memory, ForbiddenWrite):
                outcomes[position] = forbidden(decision.write)
            else:
                outcomes[position] = _Committed(decision, memory)
        return [
            _outcome(claimed.call, outcomes[position], settings.reply_ttl_ms)
            for position, claimed in enumerate(calls)
        ]


UPDATE: Final = UpdateMemory()


def _outcome(
    call: ToolCallRequested, outcome: Rejection | _Committed, reply_ttl_ms: int
) -> Outcome:
    if isinstance(outcome, Rejection):
        return refused(call, outcome, reply_ttl_ms)
    status, message, data = success(outcome.planned.write, outcome.written)
    result = answer(call, status, message, data)
    return Outcome(result, _events_of(call, result, outcome, reply_ttl_ms))


async def _decide(
    call: ToolCallRequested,
    tx: ToolCallTransaction,
    state: ServerState | None,
    max_memory_length: int,
    directories: dict[int, list[DirectoryMember]],
) -> Rejection | _Planned:
    """Update steps 1 to 7 of docs/behaviour.md: the first that fails decides the result."""
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
                directories[state.server_id] = await tx.members.load_directory(state.server_id)
            directory = directories[state.server_id]
        resolution = resolve_target_user(
            arguments.target_user, context.participants, directory, is_dm=context.is_dm
        )
        target = check_target(resolution, bot_user_id=context.bot_user_id)
        if isinstance(target, Rejection):
            return target
        user = await tx.members.load_user(target.user_id, server_id=state.server_id)
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
    """The result, embed, invalidation and audit event (docs/behaviour.md, update step 9)."""
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
