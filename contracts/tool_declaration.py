"""The `update_long_term_memory` tool as the LLM is offered it, in OpenAI and Gemini shapes."""

from __future__ import annotations

from typing import Any, Final

from contracts.tool_calls import UPDATE_LONG_TERM_MEMORY

__all__ = [
    "TOOL_DESCRIPTION",
    "TOOL_PARAMETERS",
    "gemini_function_declaration",
    "openai_tool",
]

TOOL_DESCRIPTION: Final = (
    "Replace or delete one of your long-term memories, shown to you as ID:N. "
    "Give the new text in memory_content, or an empty string (or only white space) to "
    "delete it; text of only invisible characters, such as zero-width spaces, is refused. "
    "For a memory about a person, give target_user: their name as seen in the chat."
)

TOOL_PARAMETERS: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "memory_id": {
            "type": "integer",
            "minimum": 1,
            "description": "The N of the memory's ID:N.",
        },
        "memory_content": {
            "type": "string",
            "description": (
                "The memory's new text; an empty string, or only white space, deletes the "
                "memory. Text of only invisible characters (zero-width, formatting) is refused."
            ),
        },
        "target_user": {
            "type": "string",
            "description": (
                "For a personal memory about someone: their name or mention as seen in "
                "the conversation. Leave out for a server memory."
            ),
        },
    },
    "required": ["memory_id", "memory_content"],
}


def openai_tool() -> dict[str, Any]:
    """Chat Completions `tools[]` entry."""
    return {
        "type": "function",
        "function": {
            "name": UPDATE_LONG_TERM_MEMORY,
            "description": TOOL_DESCRIPTION,
            "parameters": TOOL_PARAMETERS,
        },
    }


def gemini_function_declaration() -> dict[str, Any]:
    """Gemini `functionDeclarations[]` entry (OpenAPI-subset schema, upper-case types)."""
    return {
        "name": UPDATE_LONG_TERM_MEMORY,
        "description": TOOL_DESCRIPTION,
        "parameters": _gemini_schema(TOOL_PARAMETERS),
    }


def _gemini_schema(schema: dict[str, Any]) -> dict[str, Any]:
    converted: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type":
            converted[key] = str(value).upper()
        elif key == "properties":
            converted[key] = {name: _gemini_schema(sub) for name, sub in value.items()}
        elif key == "minimum":
            continue  # Gemini's schema subset has no integer bounds; the pipeline checks them.
        else:
            converted[key] = value
    return converted
