"""What the LLM is told: one short, actionable sentence per situation."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from worker.core import messages

LABEL = "Alice (@alice)"
# A memory's text as stored, quoted by the conflict's message.
CURRENT = "Movie night is on Saturdays, says {user}."

# Each message function by name, with its arguments where it has any.
EVERY_MESSAGE: list[tuple[str, Callable[[], str]]] = [
    ("arguments_not_object", messages.arguments_not_object),
    ("invalid_memory_id", messages.invalid_memory_id),
    ("invalid_memory_content", messages.invalid_memory_content),
    ("invalid_target_user", lambda: messages.invalid_target_user("target_user")),
    ("internal_error", messages.internal_error),
    ("disabled", messages.disabled),
    ("content_too_long", lambda: messages.content_too_long(length=1001, max_length=1000)),
    ("content_has_nul", messages.content_has_nul),
    ("content_not_visible", messages.content_not_visible),
    ("ambiguous_user", lambda: messages.ambiguous_user(["Alex (@a1)", "Alex (@a2)", "Alexa"])),
    ("user_not_found", messages.user_not_found),
    ("bridge_user_target", lambda: messages.bridge_user_target(LABEL)),
    ("bot_target", lambda: messages.bot_target(LABEL)),
    ("user_not_stored", lambda: messages.user_not_stored(LABEL)),
    ("not_current_member", lambda: messages.not_current_member(LABEL)),
    ("dm_other_user", lambda: messages.dm_other_user(LABEL)),
    ("privacy_restricted", lambda: messages.privacy_restricted(LABEL)),
    ("tool_call_id_reused", messages.tool_call_id_reused),
    ("not_found_server", lambda: messages.not_found_server(24)),
    (
        "not_found_server_is_personal_memory",
        lambda: messages.not_found_server_is_personal_memory(24),
    ),
    ("not_found_personal", lambda: messages.not_found_personal(24, LABEL)),
    (
        "not_found_personal_is_server_memory",
        lambda: messages.not_found_personal_is_server_memory(24, LABEL),
    ),
    ("forbidden_server", lambda: messages.forbidden_server(24)),
    ("forbidden_personal", lambda: messages.forbidden_personal(24, LABEL)),
    ("changed_since_shown_server", lambda: messages.changed_since_shown_server(24, CURRENT)),
    (
        "changed_since_shown_personal",
        lambda: messages.changed_since_shown_personal(24, LABEL, CURRENT),
    ),
    ("deleted_since_shown_server", lambda: messages.deleted_since_shown_server(24)),
    ("deleted_since_shown_personal", lambda: messages.deleted_since_shown_personal(24, LABEL)),
    ("memory_updated", lambda: messages.memory_updated(24, None)),
    ("memory_updated", lambda: messages.memory_updated(24, LABEL)),
    ("memory_deleted", lambda: messages.memory_deleted(24, None)),
    ("memory_deleted", lambda: messages.memory_deleted(24, LABEL)),
    ("database_unavailable", messages.database_unavailable),
    ("create_arguments_not_object", messages.create_arguments_not_object),
    ("invalid_new_memory_content", messages.invalid_new_memory_content),
    ("invalid_memory_scope", messages.invalid_memory_scope),
    ("missing_target_user", messages.missing_target_user),
    (
        "invalid_new_memory_target_user",
        lambda: messages.invalid_new_memory_target_user("target_user"),
    ),
    ("save_internal_error", messages.save_internal_error),
    ("saving_disabled", messages.saving_disabled),
    ("empty_new_memory", messages.empty_new_memory),
    ("save_user_not_found", messages.save_user_not_found),
    ("save_user_not_stored", lambda: messages.save_user_not_stored(LABEL)),
    ("save_not_current_member", lambda: messages.save_not_current_member(LABEL)),
    ("save_dm_other_user", lambda: messages.save_dm_other_user(LABEL)),
    ("save_privacy_restricted", lambda: messages.save_privacy_restricted(LABEL)),
    ("duplicate_memory", lambda: messages.duplicate_memory(24, None)),
    ("duplicate_memory", lambda: messages.duplicate_memory(24, LABEL)),
    ("limit_exceeded", lambda: messages.limit_exceeded(25, 25, None)),
    ("limit_exceeded", lambda: messages.limit_exceeded(25, 25, LABEL)),
    ("memory_saved", lambda: messages.memory_saved(24, None)),
    ("memory_saved", lambda: messages.memory_saved(24, LABEL)),
    ("memory_saved_about_a_bot", lambda: messages.memory_saved_about_a_bot(24)),
    (
        "memory_saved_about_a_bridge_user",
        lambda: messages.memory_saved_about_a_bridge_user(24, "Alice"),
    ),
    ("save_database_unavailable", messages.save_database_unavailable),
]


@pytest.mark.parametrize(("function", "message"), EVERY_MESSAGE)
def test_every_message_is_one_short_sentence(function: str, message: Callable[[], str]) -> None:
    text = message()
    assert text[0].isupper() or text[0] in "\"'" or text.startswith(("memory_", "target_user"))
    assert text.endswith(".")
    assert "\n" not in text
    # One sentence: no full stop followed by a new sentence before the end.
    assert not re.search(r"[.!?] [A-Z]", text.replace("ID:24", "")), text
    assert len(text) <= 250


def test_every_message_function_is_covered() -> None:
    assert {function for function, _ in EVERY_MESSAGE} == set(messages.__all__)


def test_messages_carry_what_the_llm_needs() -> None:
    assert "1001" in messages.content_too_long(length=1001, max_length=1000)
    assert "1000" in messages.content_too_long(length=1001, max_length=1000)
    ambiguity = messages.ambiguous_user(["Alex (@a1)", "Alex (@a2)"])
    assert '"Alex (@a1)"' in ambiguity
    assert '"Alex (@a2)"' in ambiguity
    assert "target_user_nickname" in messages.invalid_target_user("target_user_nickname")
    assert "24" in messages.invalid_memory_id()
    for text in (
        messages.not_found_server(24),
        messages.not_found_personal(24, LABEL),
        messages.memory_updated(24, None),
        messages.memory_deleted(24, LABEL),
    ):
        assert "ID:24" in text
    assert LABEL in messages.memory_updated(24, LABEL)


def test_create_messages_carry_what_the_llm_needs() -> None:
    assert "ID:24" in messages.duplicate_memory(24, None)
    assert LABEL in messages.duplicate_memory(24, LABEL)
    limit = messages.limit_exceeded(25, 20, LABEL)
    assert "25" in limit and "20" in limit and LABEL in limit
    assert "update_long_term_memory" in limit
    assert "ID:24" in messages.memory_saved(24, None)
    assert '"Alice"' in messages.memory_saved_about_a_bridge_user(24, "Alice")
    assert "server_wide" in messages.save_user_not_stored(LABEL)


def test_not_found_names_the_other_scope_only_when_told() -> None:
    assert "target_user" not in messages.not_found_server(24)
    assert "personal" not in messages.not_found_server(24)
    assert "with target_user" in messages.not_found_server_is_personal_memory(24)
    assert "server memory" not in messages.not_found_personal(24, LABEL)
    assert "without target_user" in messages.not_found_personal_is_server_memory(24, LABEL)
