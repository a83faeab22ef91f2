"""The tools as the LLM is offered them, in OpenAI and Gemini shapes.

`remember_this_fact` is not offered: it is the create tool's old name, taken from bots that
still call it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from contracts.tool_calls import CREATE_LONG_TERM_MEMORY, UPDATE_LONG_TERM_MEMORY

__all__ = [
    "CREATE_TOOL",
    "OFFERED_TOOLS",
    "TOOL_DESCRIPTION",
    "TOOL_PARAMETERS",
    "UPDATE_TOOL",
    "ToolDeclaration",
    "gemini_function_declaration",
    "gemini_function_declarations",
    "openai_tool",
    "openai_tools",
]


@dataclass(frozen=True, slots=True)
class ToolDeclaration:
    """A tool's name, what it is for, and its parameters as a JSON Schema object."""

    name: str
    description: str
    parameters: dict[str, Any]


_TARGET_USER: Final = {
    "type": "string",
    "description": (
        "For a personal memory about someone: their name or mention as seen in the "
        "conversation. Leave out for a server memory."
    ),
}

TOOL_DESCRIPTION: Final = (
    "Replace or delete one of your long-term memories, shown to you as ID:N. "
    "Give the new text in memory_content, or an empty string (or only white space) to "
    "delete it; text of only invisible characters, such as zero-width spaces, is refused. "
    "For a memory about a person, give target_user: their name as seen in the chat. "
    "If the memory changed since it was shown to you, nothing is changed and the answer "
    "gives what it says now: decide again from that text, and call again only if it still "
    "needs a change."
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
        "target_user": _TARGET_USER,
    },
    "required": ["memory_id", "memory_content"],
}

UPDATE_TOOL: Final = ToolDeclaration(UPDATE_LONG_TERM_MEMORY, TOOL_DESCRIPTION, TOOL_PARAMETERS)

CREATE_TOOL: Final = ToolDeclaration(
    CREATE_LONG_TERM_MEMORY,
    (
        "Save a new long-term memory: a distinct fact, preference or instruction worth "
        "keeping, that none of your memories already holds. Write it in the third person; "
        "{user} stands for the person it is about and {bot} for you. Use memory_scope "
        "server_wide for something about this server or everyone, target_user (with "
        "target_user) for something about one person."
    ),
    {
        "type": "object",
        "properties": {
            "memory_content": {
                "type": "string",
                "description": (
                    "The memory's text, in the third person. It may not be empty, and text of "
                    "only invisible characters (zero-width, formatting) is refused."
                ),
            },
            "memory_scope": {
                "type": "string",
                "enum": ["server_wide", "target_user"],
                "description": (
                    "server_wide: a memory of this server; target_user: a personal memory "
                    "about the person given in target_user."
                ),
            },
            "target_user": {
                **_TARGET_USER,
                "description": (
                    "With memory_scope target_user: the person's name or mention as seen in "
                    "the conversation."
                ),
            },
        },
        "required": ["memory_content", "memory_scope"],
    },
)

# What a bot offers the LLM, in this order.
OFFERED_TOOLS: Final = (CREATE_TOOL, UPDATE_TOOL)

_BY_NAME: Final = {tool.name: tool for tool in OFFERED_TOOLS}


def openai_tool(name: str = UPDATE_LONG_TERM_MEMORY) -> dict[str, Any]:
    """A Chat Completions `tools[]` entry."""
    tool = _BY_NAME[name]
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    }


def openai_tools() -> list[dict[str, Any]]:
    return [openai_tool(tool.name) for tool in OFFERED_TOOLS]


def gemini_function_declaration(name: str = UPDATE_LONG_TERM_MEMORY) -> dict[str, Any]:
    """A Gemini `functionDeclarations[]` entry (OpenAPI-subset schema, upper-case types)."""
    tool = _BY_NAME[name]
    return {
        "name": tool.name,
        "description": tool.description,
        "parameters": _gemini_schema(tool.parameters),
    }


def gemini_function_declarations() -> list[dict[str, Any]]:
    return [gemini_function_declaration(tool.name) for tool in OFFERED_TOOLS]


def _gemini_schema(schema: dict[str, Any]) -> dict[str, Any]:
    converted: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type":
            converted[key] = str(value).upper()
        elif key == "properties":
            converted[key] = {name: _gemini_schema(sub) for name, sub in value.items()}
        elif key == "minimum":
            continue  # Gemini's schema subset has no integer bounds; the pipeline checks them.
        elif key == "enum":
            # Gemini takes the values of a string enum with the format that says so.
            converted[key] = value
            converted["format"] = "enum"
        else:
            converted[key] = value
    return converted
