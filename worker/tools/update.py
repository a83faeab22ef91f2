"""`update_long_term_memory`: change or delete one memory (docs/behaviour.md, update steps).

A batch's updates are decided call by call, in order (each may load the member directory of
its server once, and its target's users row), then written together.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from contracts import (
    UPDATE_STATUSES,
    MemoryDeleted,
    MemoryUpdated,
    ToolCallRequested,
    ToolStatuses,
)
from worker.core import messages
from worker.core.embed import build_embed
from worker.core.model import (
    DirectoryMember,
    ForbiddenWrite,
    MemoryWrite,
    Rejection,
    ResolvedUser,
    ServerState,
    StaleWrite,
    StoredUser,
    UpdateArguments,
    WrittenMemory,
)
from worker.core.outgoing import change_events
from worker.core.people import name_of
from worker.core.records import PlannedWrite
from worker.core.resolve import resolve_target_user
from worker.core.sanitize import prepare_content
from worker.core.update import (
    changed_since_shown,
    check_update_owner,
    check_update_server_state,
    check_update_target,
    forbidden,
    not_found,
    parse_update_arguments,
    plan_update,
    result_of_update,
)
from worker.ports import ToolCallTransaction
from worker.tools.base import (
    ClaimedCall,
    ResultAndEvents,
    ToolSettings,
    embed_requested,
    refused,
    result_for,
)

__all__ = ["UPDATE", "UpdateMemory"]


@dataclass(frozen=True, slots=True)
class _Checked:
    """Steps 1 to 4 passed."""

    call: ToolCallRequested
    state: ServerState
    arguments: UpdateArguments
    content: str


@dataclass(frozen=True, slots=True)
class _Planned:
    """Steps 5 to 7 passed: the write the core decided on, with the facts its events need."""

    checked: _Checked
    write: MemoryWrite
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
        settings: ToolSettings,
    ) -> list[ResultAndEvents]:
        directories: dict[int, list[DirectoryMember]] = {}
        decided: list[Rejection | _Checked | _Planned | _Committed] = []
        for claimed in calls:
            checked = _check(claimed, settings.max_memory_length)
            decided.append(
                await _plan(checked, tx, directories) if isinstance(checked, _Checked) else checked
            )
        planned = [(p, plan) for p, plan in enumerate(decided) if isinstance(plan, _Planned)]
        written = await tx.memories.apply(
            [
                PlannedWrite(
                    plan.write,
                    actor=plan.checked.call.context.triggerer_id,
                    tool_call_id=plan.checked.call.tool_call_id,
                )
                for _, plan in planned
            ]
        )
        for (position, plan), memory in zip(planned, written, strict=True):
            if memory is None:
                participants = [p.user_id for p in plan.checked.call.context.participants]
                in_other_scope = await tx.memories.in_other_scope(
                    plan.write, participant_ids=participants
                )
                decided[position] = not_found(plan.write, in_other_scope=in_other_scope)
            elif isinstance(memory, ForbiddenWrite):
                decided[position] = forbidden(plan.write)
            elif isinstance(memory, StaleWrite):
                decided[position] = changed_since_shown(plan.write, memory)
            else:
                decided[position] = _Committed(plan, memory)
        results_and_events = []
        for claimed, step in zip(calls, decided, strict=True):
            assert isinstance(step, Rejection | _Committed)  # every step is decided by now
            results_and_events.append(_result_and_events(claimed.call, step, settings.reply_ttl_ms))
        return results_and_events


UPDATE: Final = UpdateMemory()


def _check(claimed: ClaimedCall, max_memory_length: int) -> Rejection | _Checked:
    """Steps 1 to 4: the first that fails decides the result."""
    call, state = claimed.call, claimed.state
    arguments = parse_update_arguments(call.arguments)
    if isinstance(arguments, Rejection):
        return arguments
    refusal = check_update_server_state(state, call.context)
    if refusal is not None:
        return refusal
    assert state is not None  # check_update_server_state refuses a missing one
    content = prepare_content(arguments.content, max_memory_length)
    if isinstance(content, Rejection):
        return content
    return _Checked(call, state, arguments, content)


async def _plan(
    checked: _Checked,
    tx: ToolCallTransaction,
    directories: dict[int, list[DirectoryMember]],
) -> Rejection | _Planned:
    """Steps 5 to 7: the person (each server's directory loaded once a batch), then the write."""
    context, state, arguments = checked.call.context, checked.state, checked.arguments
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
        target = check_update_target(resolution, bot_user_id=context.bot_user_id)
        if isinstance(target, Rejection):
            return target
        user = await tx.members.load_user(target.user_id, server_id=state.server_id)
        refusal = check_update_owner(
            target, user, context=context, directory=directory, is_delete=checked.content == ""
        )
        if refusal is not None:
            return refusal
        assert user is not None  # check_update_owner refuses an unknown user
        owner = (target, user)
    write = plan_update(arguments, checked.content, state, owner, context=context)
    return _Planned(checked, write, directory, owner[1] if owner else None)


def _result_and_events(
    call: ToolCallRequested, step: Rejection | _Committed, reply_ttl_ms: int
) -> ResultAndEvents:
    """A refusal's result alone; a write's result, embed, invalidation and audit event
    (docs/behaviour.md, update step 9)."""
    if isinstance(step, Rejection):
        return refused(call, step, reply_ttl_ms)
    context, planned, written = call.context, step.planned, step.written
    write, state, directory = planned.write, planned.checked.state, planned.directory
    result = result_for(call, *result_of_update(write, written))
    embed = embed_requested(
        call,
        "memory_deleted" if write.is_delete else "memory_updated",
        build_embed(
            write,
            written,
            persona_nickname=state.persona_nickname,
            triggerer_name=name_of(context.triggerer_id, context.participants, directory),
            owner_name=(
                name_of(write.owner_disc_id, context.participants, directory)
                if write.owner_disc_id is not None
                else None
            ),
            personal_memories_enabled=state.personal_memories_enabled,
            owner_blacklisted=planned.owner.blacklisted_here if planned.owner else False,
        ),
        result,
        write.owner_disc_id,
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
    )
    events = change_events(
        audit,
        server_disc_id=context.server_disc_id,
        answered=(result, embed),
        reply_ttl_ms=reply_ttl_ms,
    )
    return ResultAndEvents(result, events)
