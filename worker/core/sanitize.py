"""Placeholder sanitizing and the content check of step 4 of the pipeline.

Memories may keep the template tokens `{user}`, `{bot}` and `{char}` (any case, single
or double braces); any other brace-wrapped word loses its braces.

Only an empty or blank text deletes. A text that is not empty but shows nothing is refused:
it would be saved as a memory nobody can see, and the LLM meant either a text or a delete.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Final

from contracts import MemoryStatus
from worker.core import messages
from worker.core.model import Rejection

__all__ = ["TEMPLATE_TOKENS", "prepare_content", "sanitize_placeholders"]

TEMPLATE_TOKENS: Final = frozenset({"user", "bot", "char"})

# A word is an ASCII letter followed by ASCII letters, digits or underscores; `\w` would
# also accept non-ASCII letters, which the spec leaves as written.
_WORD: Final = r"[A-Za-z][A-Za-z0-9_]*"
_DOUBLE_BRACED: Final = re.compile(r"\{\{(" + _WORD + r")\}\}")
_SINGLE_BRACED: Final = re.compile(r"\{(" + _WORD + r")\}")

# Unicode general categories that show nothing by themselves: separators (Z*), controls (Cc),
# format characters such as the zero-width ones (Cf), surrogates (Cs), and marks (M*), which
# only decorate the character before them (variation selectors are marks too). Unassigned
# code points (Cn) count as visible: they may be characters newer than Python's Unicode data.
_INVISIBLE_CATEGORIES: Final = frozenset({"Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Mn", "Mc", "Me"})
# Letters by category, but default-ignorable in Unicode (drawn as nothing): the Hangul fillers.
_INVISIBLE_LETTERS: Final = frozenset("\u115f\u1160\u3164\uffa0")


def _unbrace(match: re.Match[str]) -> str:
    word = match.group(1)
    if word.lower() in TEMPLATE_TOKENS:
        return match.group(0)
    return word


def sanitize_placeholders(text: str) -> str:
    """Strips the braces of every brace-wrapped word that is not a template token.

    One pass of `{{word}}` then `{word}` can leave a brace-wrapped word behind
    (`{{{{foo}}}}` becomes `{foo}`, `{{foo}bar}` becomes `{foobar}`), which the rule
    "any other brace-wrapped word loses its braces" forbids, so the two steps repeat
    until nothing changes. Every step removes characters, so this ends, and the result
    is a fixed point: sanitizing twice gives what sanitizing once gives.
    """
    while True:
        sanitized = _SINGLE_BRACED.sub(_unbrace, _DOUBLE_BRACED.sub(_unbrace, text))
        if sanitized == text:
            return sanitized
        text = sanitized


def _has_visible_character(text: str) -> bool:
    """Whether any character of `text` shows by itself (see `_INVISIBLE_CATEGORIES`)."""
    return any(
        unicodedata.category(character) not in _INVISIBLE_CATEGORIES
        and character not in _INVISIBLE_LETTERS
        for character in text
    )


def prepare_content(raw: str, max_length: int) -> str | Rejection:
    """Step 4: trim and sanitize the new content; "" means delete.

    An update with no visible character, or longer than `max_length` code points after
    sanitizing, is rejected.
    """
    # No second trim after sanitizing: the sanitizer only removes braces that sit
    # directly around a word starting with a letter, so it can neither expose white
    # space at either end of trimmed text nor empty it.
    if "\x00" in raw:
        # PostgreSQL text cannot hold NUL: refuse, rather than store something else.
        return Rejection(status=MemoryStatus.INVALID_CONTENT, message=messages.content_has_nul())
    content = sanitize_placeholders(raw.strip())
    if content and not _has_visible_character(content):
        return Rejection(
            status=MemoryStatus.INVALID_CONTENT, message=messages.content_not_visible()
        )
    if len(content) > max_length:
        return Rejection(
            status=MemoryStatus.INVALID_CONTENT,
            message=messages.content_too_long(length=len(content), max_length=max_length),
        )
    return content
