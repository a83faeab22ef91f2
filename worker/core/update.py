"""The update tool's decisions (docs/behaviour.md, update steps): pure functions over the call
and its facts, each giving a Rejection or the way forward.

The tool (`worker.tools.update`) loads the facts (server state, the target's `users` row, the
directory), calls these in the order of the update steps and stops at the first Rejection. The
create tool reuses the steps both share (`worker.core.create`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from contracts import MemoryStatus, ResultData, ToolCallContext, is_matrix_id
from worker.core import messages
from worker.core.model import (
    AmbiguousUser,
    DirectoryMember,
    MemoryWrite,
    NoSuchUser,
    Rejection,
    Resolution,
    ResolvedUser,
    ServerState,
    StaleWrite,
    StoredUser,
    UpdateArguments,
    WrittenMemory,
)
from worker.core.resolve import is_current_member

__all__ = [
    "DELETED_SINCE_SHOWN",
    "MAX_MEMORY_ID",
    "TARGET_USER_ARGUMENTS",
    "WrongType",
    "changed_since_shown",
    "check_update_owner",
    "check_update_server_state",
    "check_update_target",
    "forbidden",
    "not_found",
    "parse_update_arguments",
    "plan_update",
    "read_target_user",
    "result_of_update",
]

# The largest integer every JSON peer (JavaScript included) represents exactly.
MAX_MEMORY_ID: Final = 2**53 - 1

# `data.reason` of a not-found memory that the LLM was shown (`context.seen`).
DELETED_SINCE_SHOWN: Final = "deleted_since_shown"

# `target_user` first, then the legacy names, in the order they are read.
TARGET_USER_ARGUMENTS: Final = ("target_user", "target_user_nickname", "target_user_discord_id")

# users.privacy_level: 0 minimal; 1 partial and 2 full restrict rewriting.
_PRIVACY_MINIMAL = 0


def parse_update_arguments(raw: object) -> UpdateArguments | Rejection:
    """Step 1: the arguments, untrusted, as the LLM produced them; the first problem found is
    the one reported.

    Every name for the target user is type-checked whenever it is present and not
    null, even when an earlier one already names somebody: a malformed call is
    reported rather than half-read. Unknown extra keys are ignored.
    """
    if not isinstance(raw, dict):
        return _invalid(messages.arguments_not_object())

    memory_id = _memory_id(raw.get("memory_id"))
    if memory_id is None:
        return _invalid(messages.invalid_memory_id())

    content = raw.get("memory_content")
    if not isinstance(content, str):
        return _invalid(messages.invalid_memory_content())

    target_user = read_target_user(raw)
    if isinstance(target_user, WrongType):
        return _invalid(messages.invalid_target_user(target_user.argument))

    return UpdateArguments(memory_id=memory_id, content=content, target_user=target_user)


@dataclass(frozen=True, slots=True)
class WrongType:
    """A name for the target user that is present, not null, and not a string."""

    argument: str


def read_target_user(raw: dict[str, Any]) -> str | WrongType | None:
    """The first non-blank of `target_user` and its legacy names, trimmed; None if none is.

    Every one present and not null must be a string, even after an earlier one named
    somebody: a malformed call is reported rather than half-read.
    """
    target_user: str | None = None
    for argument in TARGET_USER_ARGUMENTS:
        value = raw.get(argument)
        if value is None:
            continue
        if not isinstance(value, str):
            return WrongType(argument)
        if target_user is None and value.strip():
            target_user = value.strip()
    return target_user


def _memory_id(value: object) -> int | None:
    # bool is an int subclass in Python, but JSON `true` is not a number.
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():  # False for nan and infinities
        number = int(value)
    else:
        return None
    return number if 0 < number <= MAX_MEMORY_ID else None


def _invalid(message: str) -> Rejection:
    return Rejection(status=MemoryStatus.INVALID_ARGS, message=message)


def check_update_server_state(
    state: ServerState | None, context: ToolCallContext
) -> Rejection | None:
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


def check_update_target(resolution: Resolution, *, bot_user_id: str) -> ResolvedUser | Rejection:
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


def check_update_owner(
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


def plan_update(
    args: UpdateArguments,
    content: str,
    state: ServerState,
    owner: tuple[ResolvedUser, StoredUser] | None,
    *,
    context: ToolCallContext,
) -> MemoryWrite:
    """Step 6: the scoped write. `content` is the prepared content; "" deletes."""
    new_content = content or None
    only_own = _only_own(state, context)
    seen_revision_id = context.seen_revision(args.memory_id)
    if owner is None:
        return MemoryWrite(
            scope="server_wide",
            memory_id=args.memory_id,
            content=new_content,
            server_id=state.server_id,
            persona_lineage_id=state.persona_lineage_id,
            only_own=only_own,
            seen_revision_id=seen_revision_id,
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
        seen_revision_id=seen_revision_id,
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
    """Step 8, no row: the other scope is named only when the id is within reach there; a
    memory the LLM was shown (`context.seen`) and that is gone was deleted since."""
    deleted_since_shown = write.seen_revision_id is not None and not in_other_scope
    if write.scope == "server_wide":
        if in_other_scope:
            message = messages.not_found_server_is_personal_memory(write.memory_id)
        elif deleted_since_shown:
            message = messages.deleted_since_shown_server(write.memory_id)
        else:
            message = messages.not_found_server(write.memory_id)
    else:
        label = _owner_label(write)
        if in_other_scope:
            message = messages.not_found_personal_is_server_memory(write.memory_id, label)
        elif deleted_since_shown:
            message = messages.deleted_since_shown_personal(write.memory_id, label)
        else:
            message = messages.not_found_personal(write.memory_id, label)
    data = _scoped_data(write, reason=DELETED_SINCE_SHOWN if deleted_since_shown else None)
    return Rejection(MemoryStatus.NOT_FOUND, message, data)


def changed_since_shown(write: MemoryWrite, stale: StaleWrite) -> Rejection:
    """Step 8, a memory that changed since the revision the LLM was shown: nothing written;
    the message quotes what it says now, so that the LLM can decide again."""
    if write.scope == "server_wide":
        message = messages.changed_since_shown_server(write.memory_id, stale.current_content)
    else:
        message = messages.changed_since_shown_personal(
            write.memory_id, _owner_label(write), stale.current_content
        )
    data = _scoped_data(
        write,
        current_revision_id=stale.current_revision_id,
        current_content=stale.current_content,
    )
    return Rejection(MemoryStatus.CONFLICT, message, data)


def forbidden(write: MemoryWrite) -> Rejection:
    """Step 8, a memory in scope that the edit policy keeps from the triggerer: the message
    says who may change it, and nothing of what it holds."""
    if write.scope == "server_wide":
        message = messages.forbidden_server(write.memory_id)
    else:
        message = messages.forbidden_personal(write.memory_id, _owner_label(write))
    return Rejection(MemoryStatus.FORBIDDEN, message, _scoped_data(write))


def result_of_update(
    write: MemoryWrite, written: WrittenMemory
) -> tuple[MemoryStatus, str, ResultData]:
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
    write: MemoryWrite,
    *,
    content_saved: str | None = None,
    content_deleted: str | None = None,
    current_revision_id: int | None = None,
    current_content: str | None = None,
    reason: str | None = None,
) -> ResultData:
    return ResultData(
        scope=write.scope,
        memory_id=write.memory_id,
        content_saved=content_saved,
        content_deleted=content_deleted,
        target_user=_owner_label(write) if write.scope == "target_user" else None,
        current_revision_id=current_revision_id,
        current_content=current_content,
        reason=reason,
    )
