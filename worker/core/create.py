"""The create tool's decisions (docs/behaviour.md, create steps): pure functions over the call
and its facts, each giving a Rejection or the way forward.

The update path's parts are reused where the steps are the same (server state, sanitizing,
resolving the person, the personal path's checks); what they refuse is answered with the
create tool's statuses and in its words. A batch's creations of one scope are decided in
order by one `ScopeContents`, so that each sees the memories the earlier ones will add.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Final

from contracts import (
    MemoryFallback,
    MemoryScope,
    MemoryStatus,
    ResultData,
    ToolCallContext,
    is_matrix_id,
)
from worker.core import messages
from worker.core.model import (
    AmbiguousUser,
    DirectoryMember,
    NoSuchUser,
    Rejection,
    Resolution,
    ResolvedUser,
    ServerState,
    StoredUser,
)
from worker.core.names import normalize_name
from worker.core.sanitize import prepare_content, sanitize_placeholders
from worker.core.update import (
    WrongType,
    check_update_owner,
    check_update_server_state,
    read_target_user,
)

__all__ = [
    "CreateArguments",
    "ExistingMemory",
    "NewMemory",
    "ScopeContents",
    "ScopeKey",
    "ServerFallback",
    "bridge_user_name",
    "check_create_owner",
    "check_create_server_state",
    "check_create_target",
    "content_key",
    "is_self",
    "parse_create_arguments",
    "plan_create",
    "prepare_new_content",
    "result_of_create",
    "with_bridge_user_name",
]

_SCOPES: Final[frozenset[str]] = frozenset({"server_wide", "target_user"})
_SELF: Final = "self"
_MATRIX_SUFFIX: Final = re.compile(r"\s*\(matrix\)\s*$", re.IGNORECASE)
_USER_PLACEHOLDER: Final = re.compile(r"\{\{user\}\}|\{user\}", re.IGNORECASE)

# The update path's refusals of the checks both tools share, as the create tool's statuses.
_SAVE_STATUS: Final = {
    MemoryStatus.INVALID_CONTENT: MemoryStatus.SAVE_INVALID_CONTENT,
    MemoryStatus.USER_NOT_FOUND: MemoryStatus.SAVE_USER_NOT_FOUND,
    MemoryStatus.INVALID_SCOPE: MemoryStatus.SAVE_INVALID_SCOPE,
    MemoryStatus.PRIVACY_RESTRICTED: MemoryStatus.SAVE_PRIVACY_RESTRICTED,
}


@dataclass(frozen=True, slots=True)
class CreateArguments:
    """The arguments after validation; `target_user` is set exactly for scope target_user."""

    content: str
    scope: MemoryScope
    target_user: str | None


@dataclass(frozen=True, slots=True)
class ServerFallback:
    """A memory about someone who has only server memories: a bot, or a bridged user."""

    reason: MemoryFallback
    name: str | None = None  # the bridged user's name, written in place of {user}


@dataclass(frozen=True, slots=True)
class ScopeKey:
    """The memories a new one is counted and compared with (docs/behaviour.md, create steps 6, 7):
    a server's of one lineage, or one person's of one lineage together with lineage 0."""

    scope: MemoryScope
    lineage: int
    server_id: int | None = None  # server path
    owner_disc_id: str | None = None  # personal path

    @classmethod
    def of_server(cls, server_id: int, lineage: int) -> ScopeKey:
        return cls("server_wide", lineage, server_id=server_id)

    @classmethod
    def of_owner(cls, owner_disc_id: str, lineage: int) -> ScopeKey:
        return cls("target_user", lineage, owner_disc_id=owner_disc_id)


@dataclass(frozen=True, slots=True)
class ExistingMemory:
    memory_id: int
    content: str


@dataclass(frozen=True, slots=True)
class NewMemory:
    """A memory the create tool saves, with the ids the database allocated for it."""

    scope: MemoryScope
    memory_id: int
    revision_id: int
    content: str
    server_id: int  # where it was said (for a personal memory too)
    persona_id: int
    persona_lineage_id: int
    owner_user_id: int | None = None  # personal path
    owner_disc_id: str | None = None
    owner_label: str | None = None
    fallback: MemoryFallback | None = None
    bridge_user: str | None = None  # the bridged user's name written in place of {user}


def parse_create_arguments(raw: object) -> CreateArguments | Rejection:
    """Step 1; the first problem found is the one reported, unknown extra keys are ignored.

    The target user's names are read only for scope target_user, as the update tool reads
    them; for a server memory they are ignored, whatever they hold.
    """
    if not isinstance(raw, dict):
        return _invalid(messages.create_arguments_not_object())
    content = raw.get("memory_content")
    if not isinstance(content, str):
        return _invalid(messages.invalid_new_memory_content())
    scope = raw.get("memory_scope")
    normalized = scope.strip().casefold() if isinstance(scope, str) else None
    if normalized == "server_wide":
        return CreateArguments(content=content, scope="server_wide", target_user=None)
    if normalized != "target_user":
        return _invalid(messages.invalid_memory_scope())
    target_user = read_target_user(raw)
    if isinstance(target_user, WrongType):
        return _invalid(messages.invalid_new_memory_target_user(target_user.argument))
    if target_user is None:
        return _invalid(messages.missing_target_user())
    return CreateArguments(content=content, scope="target_user", target_user=target_user)


def check_create_server_state(
    state: ServerState | None, context: ToolCallContext
) -> Rejection | None:
    """Steps 2 and 3: the update path's checks, and a persona of a lineage of its own (lineage
    0 is the global namespace: a memory saved there would reach every persona)."""
    refused = check_update_server_state(state, context)
    if state is None or (refused is not None and refused.status is not MemoryStatus.DISABLED):
        return Rejection(MemoryStatus.SAVE_INTERNAL_ERROR, messages.save_internal_error())
    if state.persona_lineage_id == 0:
        return Rejection(MemoryStatus.SAVE_INTERNAL_ERROR, messages.save_internal_error())
    if refused is not None:
        return Rejection(MemoryStatus.SAVE_DISABLED, messages.saving_disabled())
    return None


def prepare_new_content(raw: str, max_length: int) -> str | Rejection:
    """Step 4: trimmed and sanitized as an update's content; nothing left is no memory."""
    content = prepare_content(raw, max_length)
    if isinstance(content, Rejection):
        return _as_save(content)
    if not content:
        return Rejection(MemoryStatus.SAVE_INVALID_CONTENT, messages.empty_new_memory())
    return content


def is_self(target_user: str) -> bool:
    """`self` (any case, an `@` before it): the LLM means itself."""
    return normalize_name(target_user) == _SELF


def check_create_target(
    resolution: Resolution, *, bot_user_id: str
) -> ResolvedUser | ServerFallback | Rejection:
    """Step 5: the person a personal memory is about, or why it is saved server-wide."""
    if isinstance(resolution, AmbiguousUser):
        return Rejection(
            MemoryStatus.SAVE_AMBIGUOUS_USER,
            messages.ambiguous_user(resolution.candidates),
            ResultData(candidates=resolution.candidates),
        )
    if isinstance(resolution, NoSuchUser):
        return Rejection(MemoryStatus.SAVE_USER_NOT_FOUND, messages.save_user_not_found())
    if resolution.via == "matrix" or is_matrix_id(resolution.user_id):
        return ServerFallback("bridge_user", bridge_user_name(resolution.label))
    if resolution.is_bot or resolution.user_id == bot_user_id:
        return ServerFallback("bot")
    return resolution


def bridge_user_name(display_label: str) -> str:
    """A bridged user's name: the label the bridge gave, without its ` (Matrix)`."""
    return _MATRIX_SUFFIX.sub("", display_label).strip() or display_label.strip()


def with_bridge_user_name(content: str, name: str, max_length: int) -> str | Rejection:
    """`{user}` (any case, one or two braces) as the bridged user's name, in a text that stays
    sanitized and within the length a memory may have."""
    written = sanitize_placeholders(_USER_PLACEHOLDER.sub(lambda _: name, content))
    if len(written) > max_length:
        return Rejection(
            MemoryStatus.SAVE_INVALID_CONTENT,
            messages.content_too_long(length=len(written), max_length=max_length),
        )
    return written


def check_create_owner(
    target: ResolvedUser,
    user: StoredUser | None,
    *,
    context: ToolCallContext,
    directory: Sequence[DirectoryMember],
) -> Rejection | None:
    """The end of step 5: the update path's personal checks (stored, reachable here, privacy),
    each in the create tool's words."""
    refused = check_update_owner(
        target, user, context=context, directory=directory, is_delete=False
    )
    if refused is None:
        return None
    label = target.label
    if refused.status is MemoryStatus.USER_NOT_FOUND:
        message = messages.save_user_not_stored(label)
    elif refused.status is MemoryStatus.PRIVACY_RESTRICTED:
        message = messages.save_privacy_restricted(label)
    elif context.is_dm:
        message = messages.save_dm_other_user(label)
    else:
        message = messages.save_not_current_member(label)
    return Rejection(_SAVE_STATUS[refused.status], message)


def content_key(content: str) -> str:
    """What two memories that say the same thing share: trimmed, white space collapsed,
    case-folded."""
    return " ".join(content.split()).casefold()


@dataclass
class ScopeContents:
    """The memories of a batch's scopes as loaded, and the new ones the batch adds.

    Creations of one scope are admitted in order: each is compared with, and counted
    together with, those admitted before it, as if each ran in a transaction of its own.
    """

    loaded: Mapping[ScopeKey, Sequence[ExistingMemory]]
    _held: dict[ScopeKey, dict[str, int]] = field(default_factory=dict)
    _counts: dict[ScopeKey, int] = field(default_factory=dict)

    def admit(
        self, key: ScopeKey, content: str, *, memory_id: int, limit: int, owner_label: str | None
    ) -> Rejection | None:
        """Steps 6 and 7; None when the memory may be saved, and it now counts as held."""
        held = self._memories(key)
        same = held.get(content_key(content))
        if same is not None:
            return Rejection(
                MemoryStatus.SAVE_DUPLICATE,
                messages.duplicate_memory(same, owner_label),
                ResultData(scope=key.scope, memory_id=same, target_user=owner_label),
            )
        count = self._counts[key]
        if count >= limit:
            return Rejection(
                MemoryStatus.SAVE_LIMIT_EXCEEDED,
                messages.limit_exceeded(count, limit, owner_label),
                ResultData(
                    scope=key.scope,
                    target_user=owner_label,
                    current_count=count,
                    max_allowed=limit,
                ),
            )
        held[content_key(content)] = memory_id
        self._counts[key] = count + 1
        return None

    def _memories(self, key: ScopeKey) -> dict[str, int]:
        if key not in self._held:
            loaded = self.loaded.get(key, ())
            # The oldest memory that says it is the one named: the lowest id.
            self._held[key] = _first_by_key(sorted(loaded, key=lambda m: m.memory_id))
            self._counts[key] = len(loaded)
        return self._held[key]


def _first_by_key(memories: Iterable[ExistingMemory]) -> dict[str, int]:
    first: dict[str, int] = {}
    for memory in memories:
        first.setdefault(content_key(memory.content), memory.memory_id)
    return first


def plan_create(
    key: ScopeKey,
    content: str,
    state: ServerState,
    owner: tuple[ResolvedUser, StoredUser] | None,
    *,
    ids: tuple[int, int],
    fallback: ServerFallback | None,
) -> NewMemory:
    """The memory an admitted creation saves, under the (memory_id, revision_id) allocated."""
    memory_id, revision_id = ids
    target, user = owner if owner is not None else (None, None)
    return NewMemory(
        scope=key.scope,
        memory_id=memory_id,
        revision_id=revision_id,
        content=content,
        server_id=state.server_id,
        persona_id=state.persona_id,
        persona_lineage_id=state.persona_lineage_id,
        owner_user_id=user.user_id if user is not None else None,
        owner_disc_id=target.user_id if target is not None else None,
        owner_label=target.label if target is not None else None,
        fallback=fallback.reason if fallback is not None else None,
        bridge_user=fallback.name if fallback is not None else None,
    )


def result_of_create(memory: NewMemory) -> tuple[MemoryStatus, str, ResultData]:
    """The result of a committed creation."""
    if memory.fallback == "bot":
        message = messages.memory_saved_about_a_bot(memory.memory_id)
    elif memory.fallback == "bridge_user":
        message = messages.memory_saved_about_a_bridge_user(
            memory.memory_id, memory.bridge_user or "them"
        )
    else:
        message = messages.memory_saved(memory.memory_id, memory.owner_label)
    return (
        MemoryStatus.SAVED,
        message,
        ResultData(
            scope=memory.scope,
            memory_id=memory.memory_id,
            content_saved=memory.content,
            target_user=memory.owner_label if memory.scope == "target_user" else None,
            fallback=memory.fallback,
        ),
    )


def _invalid(message: str) -> Rejection:
    return Rejection(MemoryStatus.SAVE_INVALID_ARGS, message)


def _as_save(rejection: Rejection) -> Rejection:
    return replace(rejection, status=_SAVE_STATUS[rejection.status])
