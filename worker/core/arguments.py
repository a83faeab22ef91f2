"""Step 1 of the pipeline: the tool call's arguments, untrusted, as the LLM produced them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from contracts import MemoryStatus
from worker.core import messages
from worker.core.model import MemoryArguments, Rejection

__all__ = [
    "MAX_MEMORY_ID",
    "TARGET_USER_ARGUMENTS",
    "WrongType",
    "parse_arguments",
    "read_target_user",
]

# The largest integer every JSON peer (JavaScript included) represents exactly.
MAX_MEMORY_ID: Final = 2**53 - 1

# `target_user` first, then the legacy names, in the order they are read.
TARGET_USER_ARGUMENTS: Final = ("target_user", "target_user_nickname", "target_user_discord_id")


def parse_arguments(raw: object) -> MemoryArguments | Rejection:
    """Validates the arguments; the first problem found is the one reported.

    Every name for the target user is type-checked whenever it is present and not
    null, even when an earlier one already names somebody: a malformed call is
    reported rather than half-read. Unknown extra keys are ignored.
    """
    if not isinstance(raw, dict):
        return _invalid(messages.arguments_not_object())

    memory_id = _memory_id(raw.get("memory_id"))
    if memory_id is None:
        return _invalid(messages.invalid_memory_id())

    content = raw.get("memory_content")
    if not isinstance(content, str):
        return _invalid(messages.invalid_memory_content())

    target_user = read_target_user(raw)
    if isinstance(target_user, WrongType):
        return _invalid(messages.invalid_target_user(target_user.argument))

    return MemoryArguments(memory_id=memory_id, content=content, target_user=target_user)


@dataclass(frozen=True, slots=True)
class WrongType:
    """A name for the target user that is present, not null, and not a string."""

    argument: str


def read_target_user(raw: dict[str, Any]) -> str | WrongType | None:
    """The first non-blank of `target_user` and its legacy names, trimmed; None if none is.

    Every one present and not null must be a string, even after an earlier one named
    somebody: a malformed call is reported rather than half-read.
    """
    target_user: str | None = None
    for argument in TARGET_USER_ARGUMENTS:
        value = raw.get(argument)
        if value is None:
            continue
        if not isinstance(value, str):
            return WrongType(argument)
        if target_user is None and value.strip():
            target_user = value.strip()
    return target_user


def _memory_id(value: object) -> int | None:
    # bool is an int subclass in Python, but JSON `true` is not a number.
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():  # False for nan and infinities
        number = int(value)
    else:
        return None
    return number if 0 < number <= MAX_MEMORY_ID else None


def _invalid(message: str) -> Rejection:
    return Rejection(status=MemoryStatus.INVALID_ARGS, message=message)
