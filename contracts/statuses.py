"""Every status a `tool_call.completed` can carry."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["MemoryStatus"]


class MemoryStatus(StrEnum):
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

    @property
    def success(self) -> bool:
        return self in (MemoryStatus.UPDATED, MemoryStatus.DELETED)
