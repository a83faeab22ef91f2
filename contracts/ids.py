"""Identifier types shared by every message: Discord snowflakes and Matrix ids, always strings."""

from __future__ import annotations

from typing import Annotated

from pydantic import StringConstraints

__all__ = ["DiscordId", "MemoryIdKey", "ParticipantId", "ToolCallId", "is_matrix_id"]

# Discord ids travel as JSON strings of digits: JavaScript peers lose precision on numbers.
DiscordId = Annotated[str, StringConstraints(strict=True, pattern=r"^[0-9]{1,20}$")]

# A participant is a Discord user or a bridged Matrix user (`@alice:matrix.org`).
ParticipantId = Annotated[
    str, StringConstraints(strict=True, pattern=r"^(?:[0-9]{1,20}|@[^:\s]+:\S+)$")
]

# A memory id as a JSON object's key: a string of digits.
MemoryIdKey = Annotated[str, StringConstraints(strict=True, pattern=r"^[0-9]{1,20}$")]

ToolCallId = Annotated[str, StringConstraints(strict=True, min_length=1, max_length=200)]


def is_matrix_id(user_id: str) -> bool:
    """True for a bridged Matrix user id such as `@alice:matrix.org`."""
    return user_id.startswith("@") and ":" in user_id
