"""Every status a `tool_call.completed` can carry, and each tool's family of them."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

__all__ = ["CREATE_STATUSES", "UPDATE_STATUSES", "MemoryStatus", "ToolStatuses"]


class MemoryStatus(StrEnum):
    # update_long_term_memory
    UPDATED = "memory_updated_successfully"
    DELETED = "memory_deleted_successfully"
    NOT_FOUND = "memory_update_failed_not_found"
    DISABLED = "memory_update_failed_disabled"
    PRIVACY_RESTRICTED = "memory_update_failed_privacy_restricted"
    INVALID_SCOPE = "memory_update_failed_invalid_scope"
    AMBIGUOUS_USER = "memory_update_failed_ambiguous_user"
    USER_NOT_FOUND = "memory_update_failed_user_not_found"
    INVALID_TARGET = "memory_update_failed_invalid_target"
    DB_ERROR = "memory_update_failed_db_error"
    INVALID_ARGS = "memory_update_failed_invalid_args"
    INVALID_CONTENT = "memory_update_failed_invalid_content"
    INTERNAL_ERROR = "memory_update_failed_internal_error"
    FORBIDDEN = "memory_update_failed_forbidden"
    CONFLICT = "memory_update_failed_conflict"

    # create_long_term_memory (and its legacy name remember_this_fact)
    SAVED = "memory_saved_successfully"
    SAVE_INVALID_ARGS = "memory_save_failed_invalid_args"
    SAVE_INTERNAL_ERROR = "memory_save_failed_internal_error"
    SAVE_DISABLED = "memory_save_failed_disabled"
    SAVE_INVALID_CONTENT = "memory_save_failed_invalid_content"
    SAVE_AMBIGUOUS_USER = "memory_save_failed_ambiguous_user"
    SAVE_USER_NOT_FOUND = "memory_save_failed_user_not_found"
    SAVE_INVALID_SCOPE = "memory_save_failed_invalid_scope"
    SAVE_PRIVACY_RESTRICTED = "memory_save_failed_privacy_restricted"
    SAVE_DUPLICATE = "memory_save_failed_duplicate"
    SAVE_LIMIT_EXCEEDED = "memory_save_failed_limit_exceeded"
    SAVE_DB_ERROR = "memory_save_failed_db_error"

    @property
    def success(self) -> bool:
        return self in _SUCCESSES


_SUCCESSES: Final = frozenset({MemoryStatus.UPDATED, MemoryStatus.DELETED, MemoryStatus.SAVED})


@dataclass(frozen=True, slots=True)
class ToolStatuses:
    """A tool's statuses for what the machinery every tool shares answers: arguments it cannot
    take, a call it could not run, and a database away past the retry budget."""

    invalid_args: MemoryStatus
    internal_error: MemoryStatus
    db_error: MemoryStatus


UPDATE_STATUSES: Final = ToolStatuses(
    invalid_args=MemoryStatus.INVALID_ARGS,
    internal_error=MemoryStatus.INTERNAL_ERROR,
    db_error=MemoryStatus.DB_ERROR,
)
CREATE_STATUSES: Final = ToolStatuses(
    invalid_args=MemoryStatus.SAVE_INVALID_ARGS,
    internal_error=MemoryStatus.SAVE_INTERNAL_ERROR,
    db_error=MemoryStatus.SAVE_DB_ERROR,
)
