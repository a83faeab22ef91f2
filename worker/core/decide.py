"""The pipeline's decisions between facts: each gives a Rejection or the way forward.

The adapter loads the facts (server state, the target's `users` row, the directory),
calls these in the order of docs/behaviour.md's update steps and stops at the first Rejection.
"""

from __future__ import annotations

from collections.abc import Sequence

from contracts import MemoryStatus, ResultData, ToolCallContext, is_matrix_id
from worker.core import messages
from worker.core.model import (
    AmbiguousUser,
    DirectoryMember,
    MemoryArguments,
    MemoryWrite,
    NoSuchUser,
    Rejection,
    Resolution,
    ResolvedUser,
    ServerState,
    StoredUser,
    WrittenMemory,
)
from worker.core.resolve import is_current_member

__all__ = [
    "check_personal_scope",
    "check_server_state",
    "check_target",
    "forbidden",
    "not_found",
    "plan_write",
    "success",
]

# users.privacy_level: 0 minimal; 1 partial and 2 full restrict rewriting.
_PRIVACY_MINIMAL = 0


def check_server_state(state: ServerState | None, context: ToolCallContext) -> Rejection | None:
    """Steps 2 and 3: the server and persona exist and belong together, and the feature is on."""
    if (
        state is None
        or state.persona_server_id != state.server_id
        # The adapter loaded them for this call; anything else is a bug, not a result.
        or state.server_disc_id != context.server_disc_id
        or state.persona_id != context.persona_id
    ):
        return Rejection(MemoryStatus.INTERNAL_ERROR, messages.internal_error())
    if not state.self_teaching_enabled:
        return Rejection(MemoryStatus.DISABLED, messages.disabled())
    return None


def check_target(resolution: Resolution, *, bot_user_id: str) -> ResolvedUser | Rejection:
    """Step 5: a resolved person who may have personal memories."""
    if isinstance(resolution, AmbiguousUser):
        return Rejection(
            MemoryStatus.AMBIGUOUS_USER,
            messages.ambiguous_user(resolution.candidates),
            ResultData(candidates=resolution.candidates),
        )
    if isinstance(resolution, NoSuchUser):
        return Rejection(MemoryStatus.USER_NOT_FOUND, messages.user_not_found())
    if resolution.via == "matrix" or is_matrix_id(resolution.user_id):
        return Rejection(MemoryStatus.INVALID_SCOPE, messages.bridge_user_target(resolution.label))
    if resolution.is_bot or resolution.user_id == bot_user_id:
        return Rejection(MemoryStatus.INVALID_TARGET, messages.bot_target(resolution.label))
    return resolution


def check_personal_scope(
    target: ResolvedUser,
    user: StoredUser | None,
    *,
    context: ToolCallContext,
    directory: Sequence[DirectoryMember],
    is_delete: bool,
) -> Rejection | None:
    """The end of step 5 and step 7: the target is stored, reachable here, and allows it."""
    if user is None:
        return Rejection(MemoryStatus.USER_NOT_FOUND, messages.user_not_stored(target.label))
    if context.is_dm:
        if target.user_id != context.triggerer_id:
            return Rejection(MemoryStatus.INVALID_SCOPE, messages.dm_other_user(target.label))
    elif not is_current_member(target.user_id, context.participants, directory):
        return Rejection(MemoryStatus.INVALID_SCOPE, messages.not_current_member(target.label))
    # Any level other than minimal restricts, so that an unknown level errs on privacy.
    if not is_delete and user.privacy_level != _PRIVACY_MINIMAL:
        return Rejection(MemoryStatus.PRIVACY_RESTRICTED, messages.privacy_restricted(target.label))
    return None


def plan_write(
    args: MemoryArguments,
    content: str,
    state: ServerState,
    owner: tuple[ResolvedUser, StoredUser] | None,
    *,
    context: ToolCallContext,
) -> MemoryWrite:
    """Step 6: the scoped write. `content` is the prepared content; "" deletes."""
    new_content = content or None
    only_own = _only_own(state, context)
    if owner is None:
        return MemoryWrite(
            scope="server_wide",
            memory_id=args.memory_id,
            content=new_content,
            server_id=state.server_id,
            persona_lineage_id=state.persona_lineage_id,
            only_own=only_own,
        )
    target, user = owner
    return MemoryWrite(
        scope="target_user",
        memory_id=args.memory_id,
        content=new_content,
        server_id=state.server_id,
        persona_lineage_id=state.persona_lineage_id,
        owner_user_id=user.user_id,
        owner_disc_id=target.user_id,
        owner_label=target.label,
        only_own=only_own,
    )


def _only_own(state: ServerState, context: ToolCallContext) -> bool:
    """The edit policy: whether the triggerer may change only the memories it taught or owns.

    A manager of the server may change any; in a DM the triggerer manages its own DM.
    """
    return (
        state.memory_edit_policy == "teacher_or_manager"
        and not context.is_dm
        and not context.triggerer_is_manager
    )


def not_found(write: MemoryWrite, *, in_other_scope: bool) -> Rejection:
    """Step 8, no row: the other scope is named only when the id is within reach there."""
    if write.scope == "server_wide":
        message = (
            messages.not_found_server_is_personal_memory(write.memory_id)
            if in_other_scope
            else messages.not_found_server(write.memory_id)
        )
    else:
        label = _owner_label(write)
        message = (
            messages.not_found_personal_is_server_memory(write.memory_id, label)
            if in_other_scope
            else messages.not_found_personal(write.memory_id, label)
        )
    return Rejection(MemoryStatus.NOT_FOUND, message, _scoped_data(write))


def forbidden(write: MemoryWrite) -> Rejection:
    """Step 8, a memory in scope that the edit policy keeps from the triggerer: the message
    says who may change it, and nothing of what it holds."""
    if write.scope == "server_wide":
        message = messages.forbidden_server(write.memory_id)
    else:
        message = messages.forbidden_personal(write.memory_id, _owner_label(write))
    return Rejection(MemoryStatus.FORBIDDEN, message, _scoped_data(write))


def success(write: MemoryWrite, written: WrittenMemory) -> tuple[MemoryStatus, str, ResultData]:
    """The result of a committed write."""
    label = _owner_label(write) if write.scope == "target_user" else None
    if write.content is None:
        return (
            MemoryStatus.DELETED,
            messages.memory_deleted(write.memory_id, label),
            _scoped_data(write, content_deleted=written.content_before),
        )
    return (
        MemoryStatus.UPDATED,
        messages.memory_updated(write.memory_id, label),
        _scoped_data(write, content_saved=write.content),
    )


def _owner_label(write: MemoryWrite) -> str:
    return write.owner_label or write.owner_disc_id or "that person"


def _scoped_data(
    write: MemoryWrite, *, content_saved: str | None = None, content_deleted: str | None = None
) -> ResultData:
    return ResultData(
        scope=write.scope,
        memory_id=write.memory_id,
        content_saved=content_saved,
        content_deleted=content_deleted,
        target_user=_owner_label(write) if write.scope == "target_user" else None,
    )
