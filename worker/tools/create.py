"""`create_long_term_memory` (and its old name `remember_this_fact`): save a new memory
(docs/behaviour.md, create steps).

A batch's creations cost three round trips, as an update does: the claim (shared with the
batch), the scopes locked and read with the new ids (one pipelined round trip), and the
inserts with the results and COMMIT. Personal memories in a guild add one before the lock:
the member directories the names are resolved in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from contracts import (
    CREATE_STATUSES,
    MemoryCreated,
    ToolCallRequested,
    ToolStatuses,
)
from worker.core import messages
from worker.core.create import (
    CreateArguments,
    NewMemory,
    ScopeContents,
    ScopeKey,
    ServerFallback,
    check_create_owner,
    check_create_server_state,
    check_create_target,
    is_self,
    parse_create_arguments,
    plan_create,
    prepare_new_content,
    result_of_create,
    with_bridge_user_name,
)
from worker.core.embed import build_created_embed
from worker.core.model import (
    DirectoryMember,
    Rejection,
    ResolvedUser,
    ServerState,
    StoredUser,
)
from worker.core.outgoing import change_events
from worker.core.people import name_of
from worker.core.records import LockedOwner, PlannedCreation
from worker.core.resolve import resolve_target_user
from worker.ports import ToolCallTransaction
from worker.tools.base import (
    ClaimedCall,
    ResultAndEvents,
    ToolSettings,
    embed_requested,
    refused,
    result_for,
)

__all__ = ["CREATE", "CreateMemory"]


@dataclass(frozen=True, slots=True)
class _Checked:
    """Steps 1 to 4 passed."""

    call: ToolCallRequested
    state: ServerState
    arguments: CreateArguments
    content: str


@dataclass(frozen=True, slots=True)
class _Destined:
    """Step 5 passed, as far as it goes without the owner's users row: where the memory goes."""

    checked: _Checked
    key: ScopeKey
    content: str
    directory: list[DirectoryMember]
    owner: ResolvedUser | None = None
    fallback: ServerFallback | None = None


@dataclass(frozen=True, slots=True)
class _Planned:
    """Steps 5 to 7 passed: the memory the core decided on, with the facts its events need."""

    destined: _Destined
    memory: NewMemory
    owner: StoredUser | None


@dataclass(frozen=True, slots=True)
class CreateMemory:
    """The batch's creations are decided together, each scope's in order of arrival."""

    statuses: ToolStatuses = CREATE_STATUSES

    def unrecorded(self, *, database_away: bool) -> Rejection:
        if database_away:
            return Rejection(self.statuses.db_error, messages.save_database_unavailable())
        return Rejection(self.statuses.internal_error, messages.save_internal_error())

    async def run(
        self,
        calls: Sequence[ClaimedCall],
        tx: ToolCallTransaction,
        settings: ToolSettings,
    ) -> list[ResultAndEvents]:
        decided: list[Rejection | _Checked | _Destined | _Planned] = [
            _check(claimed, settings.max_memory_length) for claimed in calls
        ]
        searched = sorted(
            {
                step.state.server_id
                for step in decided
                if isinstance(step, _Checked) and _searches_the_directory(step)
            }
        )
        directories = await tx.members.load_directories(searched) if searched else {}
        decided = [
            _destine(step, directories, settings.max_memory_length)
            if isinstance(step, _Checked)
            else step
            for step in decided
        ]
        destined = [step for step in decided if isinstance(step, _Destined)]
        if destined:
            keys = list(dict.fromkeys(step.key for step in destined))
            locked = await tx.scopes.lock(keys, new_ids=len(destined))
            contents = ScopeContents(locked.contents)
            ids = iter(locked.new_ids)
            for position, step in enumerate(decided):
                if isinstance(step, _Destined):
                    decided[position] = _plan(step, next(ids), locked.owners, contents, settings)
            await tx.scopes.add(
                [
                    PlannedCreation(
                        step.memory,
                        actor=step.destined.checked.call.context.triggerer_id,
                        tool_call_id=step.destined.checked.call.tool_call_id,
                    )
                    for step in decided
                    if isinstance(step, _Planned)
                ]
            )
        results_and_events = []
        for claimed, step in zip(calls, decided, strict=True):
            assert isinstance(step, Rejection | _Planned)  # every step is decided by now
            results_and_events.append(_result_and_events(claimed.call, step, settings.reply_ttl_ms))
        return results_and_events


CREATE: Final = CreateMemory()


def _check(claimed: ClaimedCall, max_memory_length: int) -> Rejection | _Checked:
    """Steps 1 to 4: the first that fails decides the result."""
    call, state = claimed.call, claimed.state
    arguments = parse_create_arguments(call.arguments)
    if isinstance(arguments, Rejection):
        return arguments
    refusal = check_create_server_state(state, call.context)
    if refusal is not None:
        return refusal
    assert state is not None  # check_create_server_state refuses a missing one
    content = prepare_new_content(arguments.content, max_memory_length)
    if isinstance(content, Rejection):
        return content
    return _Checked(call, state, arguments, content)


def _searches_the_directory(checked: _Checked) -> bool:
    target = checked.arguments.target_user
    return target is not None and not is_self(target) and not checked.call.context.is_dm


def _destine(
    checked: _Checked, directories: dict[int, list[DirectoryMember]], max_memory_length: int
) -> Rejection | _Destined:
    """Step 5 up to the owner's users row: the person, or the server instead."""
    context, state = checked.call.context, checked.state
    server_key = ScopeKey.of_server(state.server_id, state.persona_lineage_id)
    target_user = checked.arguments.target_user
    if target_user is None:
        return _Destined(checked, server_key, checked.content, [])
    if is_self(target_user):
        return _Destined(checked, server_key, checked.content, [], fallback=ServerFallback("bot"))
    directory = directories.get(state.server_id, []) if _searches_the_directory(checked) else []
    resolution = resolve_target_user(
        target_user, context.participants, directory, is_dm=context.is_dm
    )
    owner = check_create_target(resolution, bot_user_id=context.bot_user_id)
    if isinstance(owner, Rejection):
        return owner
    if isinstance(owner, ServerFallback):
        content = checked.content
        if owner.name is not None:
            written = with_bridge_user_name(content, owner.name, max_memory_length)
            if isinstance(written, Rejection):
                return written
            content = written
        return _Destined(checked, server_key, content, directory, fallback=owner)
    owner_key = ScopeKey.of_owner(owner.user_id, state.persona_lineage_id)
    return _Destined(checked, owner_key, checked.content, directory, owner=owner)


def _plan(
    destined: _Destined,
    ids: tuple[int, int],
    owners: dict[str, LockedOwner],
    contents: ScopeContents,
    settings: ToolSettings,
) -> Rejection | _Planned:
    """The end of step 5 (the owner's row, read locked), then steps 6 and 7."""
    checked, target = destined.checked, destined.owner
    state, context = checked.state, checked.call.context
    owner: tuple[ResolvedUser, StoredUser] | None = None
    if target is not None:
        locked = owners.get(target.user_id)
        user = locked.stored(state.server_id) if locked is not None else None
        refusal = check_create_owner(target, user, context=context, directory=destined.directory)
        if refusal is not None:
            return refusal
        assert user is not None  # check_create_owner refuses an unknown user
        owner = (target, user)
    limit = settings.max_personal_memories if owner else settings.max_server_memories
    refusal = contents.admit(
        destined.key,
        destined.content,
        memory_id=ids[0],
        limit=limit,
        owner_label=target.label if target is not None else None,
    )
    if refusal is not None:
        return refusal
    memory = plan_create(
        destined.key, destined.content, state, owner, ids=ids, fallback=destined.fallback
    )
    return _Planned(destined, memory, owner[1] if owner else None)


def _result_and_events(
    call: ToolCallRequested, step: Rejection | _Planned, reply_ttl_ms: int
) -> ResultAndEvents:
    """A refusal's result alone; a creation's result, embed, invalidation and audit event
    (docs/behaviour.md, create step 8)."""
    if isinstance(step, Rejection):
        return refused(call, step, reply_ttl_ms)
    context, memory = call.context, step.memory
    state, directory = step.destined.checked.state, step.destined.directory
    result = result_for(call, *result_of_create(memory))
    embed = embed_requested(
        call,
        "memory_created",
        build_created_embed(
            memory,
            persona_nickname=state.persona_nickname,
            triggerer_name=name_of(context.triggerer_id, context.participants, directory),
            owner_name=(
                name_of(memory.owner_disc_id, context.participants, directory)
                if memory.owner_disc_id is not None
                else None
            ),
            personal_memories_enabled=state.personal_memories_enabled,
            owner_blacklisted=step.owner.blacklisted_here if step.owner else False,
        ),
        result,
        memory.owner_disc_id,
    )
    audit = MemoryCreated(
        causation_id=call.event_id,
        tool_call_id=call.tool_call_id,
        revision_id=memory.revision_id,
        scope=memory.scope,
        memory_id=memory.memory_id,
        guild_id=context.guild_id,
        channel_id=context.channel_id,
        owner_id=memory.owner_disc_id,
        actor_id=context.triggerer_id,
        persona_id=state.persona_id,
        persona_lineage_id=memory.persona_lineage_id,
    )
    events = change_events(
        audit,
        server_disc_id=context.server_disc_id,
        answered=(result, embed),
        reply_ttl_ms=reply_ttl_ms,
    )
    return ResultAndEvents(result, events)
