"""Every sentence the LLM is told: one function per situation, one sentence each.

Each says what happened, or what went wrong and what to do instead. They name only
what the caller already knows (its own arguments, people of this conversation or
server, the memory it addressed), never anything of another server.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "ambiguous_user",
    "arguments_not_object",
    "bot_target",
    "bridge_user_target",
    "content_has_nul",
    "content_not_visible",
    "content_too_long",
    "database_unavailable",
    "disabled",
    "dm_other_user",
    "forbidden_personal",
    "forbidden_server",
    "internal_error",
    "invalid_memory_content",
    "invalid_memory_id",
    "invalid_target_user",
    "memory_deleted",
    "memory_updated",
    "not_current_member",
    "not_found_personal",
    "not_found_personal_is_server_memory",
    "not_found_server",
    "not_found_server_is_personal_memory",
    "privacy_restricted",
    "tool_call_id_reused",
    "user_not_found",
    "user_not_stored",
]


def _quoted(labels: Sequence[str]) -> str:
    return ", ".join(f'"{label}"' for label in labels)


# Before step 1: the idempotency record of the call's id.


def tool_call_id_reused() -> str:
    return (
        "This tool call's id was already used for a different call, so nothing was changed; "
        "make the call again as a new tool call."
    )


# Step 1: arguments.


def arguments_not_object() -> str:
    return (
        "The arguments must be a JSON object with memory_id (the N of ID:N), "
        "memory_content and, for a memory about a person, target_user."
    )


def invalid_memory_id() -> str:
    return "memory_id must be a positive whole number such as 24, the N of ID:N."


def invalid_memory_content() -> str:
    return (
        "memory_content must be a string: the memory's new text, or an empty string "
        "to delete the memory."
    )


def invalid_target_user(argument: str) -> str:
    return (
        f"{argument} must be a string with the person's name as seen in the chat, "
        "or left out for a server memory."
    )


# Steps 2 and 3: server state and feature flag.


def internal_error() -> str:
    return (
        "Memories cannot be changed here right now because of an internal problem; "
        "do not retry this call."
    )


def disabled() -> str:
    return "Changing memories is turned off in this server, so leave your memories as they are."


# Step 4: content.


def content_too_long(*, length: int, max_length: int) -> str:
    return (
        f"memory_content is {length} characters long but a memory may hold at most "
        f"{max_length}; call again with a shorter text."
    )


def content_has_nul() -> str:
    return (
        "memory_content contains a NUL character (\\u0000), which a memory cannot hold; "
        "call again with the text without it."
    )


def content_not_visible() -> str:
    return (
        "memory_content has no visible character, only invisible ones such as zero-width "
        "spaces; call again with the memory's new text, or with an empty string to delete it."
    )


# Step 5: target user.


def ambiguous_user(candidates: Sequence[str]) -> str:
    return (
        f"target_user matches more than one person ({_quoted(candidates)}); call again "
        "with target_user set to exactly one of these labels, or to the person's mention."
    )


def user_not_found() -> str:
    return (
        "Nobody in this conversation or server matches target_user; call again with the "
        "person's name as shown in the chat, or without target_user for a server memory."
    )


def bridge_user_target(label: str) -> str:
    return (
        f'"{label}" is a bridged user who has only server memories; call again without target_user.'
    )


def bot_target(label: str) -> str:
    return (
        f'"{label}" is a bot, and bots have no personal memories; call again without '
        "target_user for a server memory, or name a person."
    )


def user_not_stored(label: str) -> str:
    return (
        f'You have no personal memories about "{label}", so there is nothing to change; '
        "call again without target_user if you meant a server memory."
    )


# Step 7: personal path checks.


def not_current_member(label: str) -> str:
    return (
        f'"{label}" is not a member of this server, so their personal memories cannot be '
        "changed here."
    )


def dm_other_user(label: str) -> str:
    return (
        f"In a direct message only the personal memories of the person you are talking "
        f'with can be changed, not those of "{label}".'
    )


def privacy_restricted(label: str) -> str:
    return (
        f'"{label}" has limited what may be remembered about them, so their personal '
        "memories can be deleted but not rewritten."
    )


# Step 8: the write.


def not_found_server(memory_id: int) -> str:
    return (
        f"There is no server memory ID:{memory_id} of yours here; check the ID:N of the "
        "memory you meant."
    )


def not_found_server_is_personal_memory(memory_id: int) -> str:
    return (
        f"ID:{memory_id} is a personal memory about someone, not a server memory; call "
        "again with target_user set to the person it is about."
    )


def not_found_personal(memory_id: int, label: str) -> str:
    return (
        f'There is no personal memory ID:{memory_id} about "{label}"; check the ID:N and '
        "the person of the memory you meant."
    )


def not_found_personal_is_server_memory(memory_id: int, label: str) -> str:
    return (
        f'ID:{memory_id} is a server memory, not a personal memory about "{label}"; call '
        "again without target_user."
    )


def forbidden_server(memory_id: int) -> str:
    return (
        f"Server memory ID:{memory_id} can be changed only by the person who taught it or "
        "someone who manages this server; leave it as it is, or ask one of them."
    )


def forbidden_personal(memory_id: int, label: str) -> str:
    return (
        f'Personal memory ID:{memory_id} about "{label}" can be changed only by "{label}" or '
        "someone who manages this server; leave it as it is, or ask one of them."
    )


def memory_updated(memory_id: int, label: str | None) -> str:
    if label is None:
        return f"Server memory ID:{memory_id} now holds the new text."
    return f'Personal memory ID:{memory_id} about "{label}" now holds the new text.'


def memory_deleted(memory_id: int, label: str | None) -> str:
    if label is None:
        return f"Server memory ID:{memory_id} is deleted."
    return f'Personal memory ID:{memory_id} about "{label}" is deleted.'


# Step 10: the database, for the adapter that gives up retrying.


def database_unavailable() -> str:
    return (
        "The memory was not changed because the database is unavailable right now; "
        "tell the user it can be tried again later."
    )
