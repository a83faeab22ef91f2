"""The tool as the LLM is offered it tells the content rules the pipeline applies."""

from __future__ import annotations

from typing import Any

import pytest

from contracts import UPDATE_LONG_TERM_MEMORY, gemini_function_declaration, openai_tool


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
