"""The example bot's pure parts: what the LLM has been shown after each answer (the `seen` of
its next call), and its LLM endpoint from the settings."""

from __future__ import annotations

from datetime import UTC, datetime

from contracts import MemoryListing, PersonalMemory, ServerMemory
from examples.bot.llm import ChatCompletions
from examples.bot.memory import seen_after
from infra.settings import Settings

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _listing() -> MemoryListing:
    return MemoryListing(
        server=(
            ServerMemory(
                memory_id=24, content="Movie night is on Fridays.", created_at=NOW,
                updated_at=NOW, persona_lineage_id=7, revision_id=3,
            ),
        ),
        personal={
            "333": (
                PersonalMemory(
                    memory_id=25, content="{user} plays the violin.", created_at=NOW,
                    updated_at=NOW, persona_lineage_id=7,
                ),
            )
        },
    )  # fmt: skip


def test_a_conflict_shows_the_llm_the_memorys_new_revision() -> None:
    answer = {
        "success": False,
        "status": "memory_update_failed_conflict",
        "memory_id": 24,
        "current_revision_id": 9,
        "current_content": "Movie night is on Saturdays.",
    }
    assert seen_after(_listing(), answer) == {"24": 9, "25": 0}


def test_a_change_of_its_own_is_no_longer_checked_against_what_was_shown() -> None:
    answer = {"success": True, "status": "memory_updated_successfully", "memory_id": 24}
    assert seen_after(_listing(), answer) == {"25": 0}


def test_other_answers_leave_what_was_shown_as_it_was() -> None:
    forbidden = {"success": False, "status": "memory_update_failed_forbidden", "memory_id": 24}
    timeout = {"success": False, "status": "memory_service_timeout"}
    assert seen_after(_listing(), forbidden) == {"24": 3, "25": 0}
    assert seen_after(_listing(), timeout) == {"24": 3, "25": 0}
    assert seen_after(None, timeout) == {}


def test_without_an_endpoint_there_is_no_llm() -> None:
    assert ChatCompletions.from_settings(Settings(llm_base_url=None)) is None
    llm = ChatCompletions.from_settings(
        Settings(llm_base_url="http://127.0.0.1:8080/v1/", llm_api_key="k")
    )
    assert llm is not None
    assert llm.url == "http://127.0.0.1:8080/v1/chat/completions"
    assert llm.headers == {"Authorization": "Bearer k"}
