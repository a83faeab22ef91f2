"""The notice posted in the channel after a committed write, within Discord's embed limits."""

from __future__ import annotations

import re
from typing import Final

from contracts import CREATE_COLOR, DELETE_COLOR, UPDATE_COLOR, EmbedField, EmbedPayload
from contracts.embeds import (
    DESCRIPTION_LIMIT,
    FIELD_VALUE_LIMIT,
    FOOTER_LIMIT,
    TITLE_LIMIT,
    TOTAL_LIMIT,
)
from worker.core.create import NewMemory
from worker.core.model import MemoryWrite, WrittenMemory

__all__ = [
    "build_created_embed",
    "build_embed",
    "render_placeholders",
]

_NAME_LIMIT: Final = 80  # a name in the title or footer; keeps both readable
_ELLIPSIS: Final = "…"
_FENCE_OPEN: Final = "```\n"
_FENCE_CLOSE: Final = "\n```"
_BEFORE: Final = "Before"

_PLACEHOLDER: Final = re.compile(r"\{\{(user|bot|char)\}\}|\{(user|bot|char)\}", re.IGNORECASE)
_BACKTICK_FOLLOWED_BY_BACKTICK: Final = re.compile(r"`(?=`)")
_ZERO_WIDTH_SPACE: Final = "\u200b"
_MARKDOWN: Final = re.compile(r"([\\*_~`|])")


def build_embed(
    write: MemoryWrite,
    written: WrittenMemory,
    *,
    persona_nickname: str,
    triggerer_name: str,
    owner_name: str | None,
    personal_memories_enabled: bool,
    owner_blacklisted: bool,
) -> EmbedPayload:
    """The embed for one committed update or delete."""
    personal = write.scope == "target_user"
    owner = owner_name or write.owner_label or "them"
    user_name = owner if personal else triggerer_name

    persona = _title_name(persona_nickname)
    happened = "forgot a memory" if write.content is None else "updated a memory"
    title = f"{persona} {happened}"
    if personal:
        title += f" about {_title_name(owner)}"
    title = _shorten(title, TITLE_LIMIT)

    footer = _footer(
        write.memory_id,
        owner if personal else None,
        personal_memories_enabled=personal_memories_enabled,
        owner_blacklisted=owner_blacklisted,
    )

    def render(text: str) -> str:
        return render_placeholders(text, user_name=user_name, persona_nickname=persona_nickname)

    fields: tuple[EmbedField, ...] = ()
    if write.content is None:
        shown = written.content_before
    else:
        shown = write.content
        fields = (
            EmbedField(
                name=_BEFORE,
                value=_code_block(render(written.content_before), FIELD_VALUE_LIMIT),
            ),
        )

    # The description gets what the other parts leave of the total.
    others = len(title) + len(footer) + sum(len(f.name) + len(f.value) for f in fields)
    description = _code_block(render(shown), min(DESCRIPTION_LIMIT, TOTAL_LIMIT - others))

    return EmbedPayload(
        title=title,
        description=description,
        color=DELETE_COLOR if write.content is None else UPDATE_COLOR,
        footer=footer,
        fields=fields,
    )


def build_created_embed(
    memory: NewMemory,
    *,
    persona_nickname: str,
    triggerer_name: str,
    owner_name: str | None,
    personal_memories_enabled: bool,
    owner_blacklisted: bool,
) -> EmbedPayload:
    """The embed for one committed creation: the saved text, in green."""
    personal = memory.scope == "target_user"
    owner = owner_name or memory.owner_label or "them"
    persona = _title_name(persona_nickname)
    title = _shorten(
        f"{persona} learned something about {_title_name(owner)}"
        if personal
        else f"{persona} learned something new",
        TITLE_LIMIT,
    )
    footer = _footer(
        memory.memory_id,
        owner if personal else None,
        personal_memories_enabled=personal_memories_enabled,
        owner_blacklisted=owner_blacklisted,
    )
    shown = render_placeholders(
        memory.content,
        user_name=owner if personal else triggerer_name,
        persona_nickname=persona_nickname,
    )
    return EmbedPayload(
        title=title,
        description=_code_block(
            shown, min(DESCRIPTION_LIMIT, TOTAL_LIMIT - len(title) - len(footer))
        ),
        color=CREATE_COLOR,
        footer=footer,
    )


def _footer(
    memory_id: int,
    owner: str | None,
    *,
    personal_memories_enabled: bool,
    owner_blacklisted: bool,
) -> str:
    """The memory's id and how it can be managed; `owner` None for a server memory."""
    if owner is None:
        manage = "Manage server memories with /memory server"
    elif not personal_memories_enabled:
        manage = "Personalization is off in this server, so this memory is not used here"
    elif owner_blacklisted:
        manage = f"{_plain_name(owner)} is excluded from personalization in this server"
    else:
        manage = "Manage personal memories with /memory personal"
    return _shorten(f"ID:{memory_id} · {manage}", FOOTER_LIMIT)


def render_placeholders(text: str, *, user_name: str, persona_nickname: str) -> str:
    """`{user}` as the person, `{bot}` and `{char}` as the persona; any case, 1 or 2 braces."""

    def replace(match: re.Match[str]) -> str:
        token = (match.group(1) or match.group(2)).lower()
        return user_name if token == "user" else persona_nickname

    return _PLACEHOLDER.sub(replace, text)


def _code_block(text: str, limit: int) -> str:
    # A zero-width space between backticks: no run of them can close the fence.
    inner = _BACKTICK_FOLLOWED_BY_BACKTICK.sub("`" + _ZERO_WIDTH_SPACE, text)
    inner = _shorten(inner, limit - len(_FENCE_OPEN) - len(_FENCE_CLOSE))
    return f"{_FENCE_OPEN}{inner}{_FENCE_CLOSE}"


def _plain_name(name: str) -> str:
    """One line, of reasonable length."""
    return _shorten(" ".join(name.split()), _NAME_LIMIT)


def _title_name(name: str) -> str:
    # Titles render some markdown; a name should show as written.
    return _MARKDOWN.sub(r"\\\1", _plain_name(name))


def _shorten(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[: max(limit - len(_ELLIPSIS), 0)] + _ELLIPSIS
