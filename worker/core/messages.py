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
    "changed_since_shown_personal",
    "changed_since_shown_server",
    "content_has_nul",
    "content_not_visible",
    "content_too_long",
    "create_arguments_not_object",
    "database_unavailable",
    "deleted_since_shown_personal",
    "deleted_since_shown_server",
    "disabled",
    "dm_other_user",
    "duplicate_memory",
    "empty_new_memory",
    "forbidden_personal",
    "forbidden_server",
    "internal_error",
    "invalid_memory_content",
    "invalid_memory_id",
    "invalid_memory_scope",
    "invalid_new_memory_content",
    "invalid_new_memory_target_user",
    "invalid_target_user",
    "limit_exceeded",
    "memory_deleted",
    "memory_saved",
    "memory_saved_about_a_bot",
    "memory_saved_about_a_bridge_user",
    "memory_updated",
    "missing_target_user",
    "not_current_member",
    "not_found_personal",
    "not_found_personal_is_server_memory",
    "not_found_server",
    "not_found_server_is_personal_memory",
    "privacy_restricted",
    "save_database_unavailable",
    "save_dm_other_user",
    "save_internal_error",
    "save_not_current_member",
    "save_privacy_restricted",
    "save_user_not_found",
    "save_user_not_stored",
    "saving_disabled",
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


# Step 8, a memory the LLM was shown (`context.seen`) that changed or went since: the text
# is quoted as stored, since it is what the LLM decides on again.


def changed_since_shown_server(memory_id: int, current_content: str) -> str:
    return (
        f"Server memory ID:{memory_id} was changed since it was shown to you, so nothing was "
        f'changed; it now says "{current_content}": decide again from this text, and call '
        "again only if it still needs a change."
    )


def changed_since_shown_personal(memory_id: int, label: str, current_content: str) -> str:
    return (
        f'Personal memory ID:{memory_id} about "{label}" was changed since it was shown to '
        f'you, so nothing was changed; it now says "{current_content}": decide again from '
        "this text, and call again only if it still needs a change."
    )


def deleted_since_shown_server(memory_id: int) -> str:
    return (
        f"Server memory ID:{memory_id} was deleted since it was shown to you, so nothing was "
        "changed; save it again as a new memory if it is still worth keeping."
    )


def deleted_since_shown_personal(memory_id: int, label: str) -> str:
    return (
        f'Personal memory ID:{memory_id} about "{label}" was deleted since it was shown to '
        "you, so nothing was changed; save it again as a new memory if it is still worth "
        "keeping."
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


# The create tool (docs/behaviour.md, create steps), step by step.


def create_arguments_not_object() -> str:
    return (
        "The arguments must be a JSON object with memory_content (the new memory's text) and "
        "memory_scope (server_wide, or target_user together with target_user)."
    )


def invalid_new_memory_content() -> str:
    return "memory_content must be a string: the text of the memory to save, in the third person."


def invalid_memory_scope() -> str:
    return (
        "memory_scope must be server_wide for a memory of this server, or target_user for a "
        "personal memory about the person named in target_user."
    )


def missing_target_user() -> str:
    return (
        "memory_scope target_user needs target_user, the person's name as seen in the chat; "
        "call again with it, or with memory_scope server_wide."
    )


def invalid_new_memory_target_user(argument: str) -> str:
    return f"{argument} must be a string with the person's name as seen in the chat."


def save_internal_error() -> str:
    return (
        "Memories cannot be saved here right now because of an internal problem; "
        "do not retry this call."
    )


def saving_disabled() -> str:
    return "Saving memories is turned off in this server, so this cannot be remembered."


def empty_new_memory() -> str:
    return "memory_content is empty; call again with the text of the memory to save."


def save_user_not_found() -> str:
    return (
        "Nobody in this conversation or server matches target_user; call again with the "
        "person's name as shown in the chat, or with memory_scope server_wide."
    )


def save_user_not_stored(label: str) -> str:
    return (
        f'Nothing personal can be saved yet about "{label}", whom this bot does not know; '
        "call again with memory_scope server_wide."
    )


def save_not_current_member(label: str) -> str:
    return (
        f'"{label}" is not a member of this server, so personal memories about them cannot be '
        "saved here."
    )


def save_dm_other_user(label: str) -> str:
    return (
        "In a direct message only personal memories about the person you are talking with "
        f'can be saved, not about "{label}".'
    )


def save_privacy_restricted(label: str) -> str:
    return (
        f'"{label}" has limited what may be remembered about them, so no personal memory '
        "about them can be saved."
    )


def duplicate_memory(memory_id: int, label: str | None) -> str:
    if label is None:
        return f"Server memory ID:{memory_id} already says this, so nothing new was saved."
    return (
        f'Personal memory ID:{memory_id} about "{label}" already says this, so nothing new '
        "was saved."
    )


def limit_exceeded(current_count: int, max_allowed: int, label: str | None) -> str:
    held = f'"{label}" has' if label is not None else "This server has"
    kind = "personal memories" if label is not None else "server memories"
    return (
        f"{held} {current_count} {kind} of yours, the most allowed is {max_allowed}; change "
        "or delete one with update_long_term_memory before saving another."
    )


def memory_saved(memory_id: int, label: str | None) -> str:
    if label is None:
        return f"Saved as server memory ID:{memory_id}."
    return f'Saved as personal memory ID:{memory_id} about "{label}".'


def memory_saved_about_a_bot(memory_id: int) -> str:
    return f"Saved as server memory ID:{memory_id}, since bots have no personal memories."


def memory_saved_about_a_bridge_user(memory_id: int, name: str) -> str:
    return (
        f'Saved as server memory ID:{memory_id}, with {{user}} written as "{name}", since '
        "bridged users have only server memories."
    )


def save_database_unavailable() -> str:
    return (
        "The memory was not saved because the database is unavailable right now; "
        "tell the user it can be tried again later."
    )
