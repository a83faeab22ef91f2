"""The tools as the LLM is offered them: what the pipeline reads is what the declaration asks."""

from __future__ import annotations

from typing import Any

import pytest

from contracts import (
    CREATE_LONG_TERM_MEMORY,
    UPDATE_LONG_TERM_MEMORY,
    gemini_function_declaration,
    gemini_function_declarations,
    openai_tool,
    openai_tools,
)


def test_both_tools_are_offered_under_their_current_names() -> None:
    assert [tool["function"]["name"] for tool in openai_tools()] == [
        CREATE_LONG_TERM_MEMORY,
        UPDATE_LONG_TERM_MEMORY,
    ]
    assert [tool["name"] for tool in gemini_function_declarations()] == [
        CREATE_LONG_TERM_MEMORY,
        UPDATE_LONG_TERM_MEMORY,
    ]


def test_the_create_tool_asks_for_content_and_scope() -> None:
    parameters = openai_tool(CREATE_LONG_TERM_MEMORY)["function"]["parameters"]
    assert parameters["required"] == ["memory_content", "memory_scope"]
    assert parameters["properties"]["memory_scope"]["enum"] == ["server_wide", "target_user"]
    assert set(parameters["properties"]) == {"memory_content", "memory_scope", "target_user"}


def test_gemini_gets_upper_case_types_and_a_string_enum() -> None:
    parameters = gemini_function_declaration(CREATE_LONG_TERM_MEMORY)["parameters"]
    assert parameters["type"] == "OBJECT"
    scope = parameters["properties"]["memory_scope"]
    assert scope == {
        "type": "STRING",
        "enum": ["server_wide", "target_user"],
        "format": "enum",
        "description": scope["description"],
    }


def test_the_update_tool_stays_the_default() -> None:
    assert openai_tool()["function"]["name"] == UPDATE_LONG_TERM_MEMORY
    update = gemini_function_declaration()["parameters"]
    assert "minimum" not in update["properties"]["memory_id"]
    assert update["required"] == ["memory_id", "memory_content"]


def _openai() -> dict[str, Any]:
    function: dict[str, Any] = openai_tool()["function"]
    return function


@pytest.mark.parametrize("declaration", [_openai, gemini_function_declaration])
def test_the_description_says_what_deletes_and_what_is_refused(
    declaration: Any,
) -> None:
    declared = declaration()
    content = declared["parameters"]["properties"]["memory_content"]["description"]
    assert declared["name"] == UPDATE_LONG_TERM_MEMORY
    for text in (declared["description"], content):
        # Blank text deletes, as the empty string does; invisible text is refused.
        assert "empty" in text
        assert "white space" in text
        assert "invisible" in text


def test_the_create_tool_says_what_content_is_refused() -> None:
    declared = openai_tool(CREATE_LONG_TERM_MEMORY)["function"]
    content = declared["parameters"]["properties"]["memory_content"]["description"]
    assert "invisible" in content
    assert "empty" in content
