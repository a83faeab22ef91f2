"""Placeholder sanitizing and the content check of step 4 of the pipeline.

Memories may keep the template tokens `{user}`, `{bot}` and `{char}` (any case, single
or double braces); any other brace-wrapped word loses its braces.
"""

from __future__ import annotations

import re
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


def prepare_content(raw: str, max_length: int) -> str | Rejection:
    """Step 4: trim and sanitize the new content; "" means delete.

    An update longer than `max_length` code points after sanitizing is rejected.
    """
    # No second trim after sanitizing: the sanitizer only removes braces that sit
    # directly around a word starting with a letter, so it can neither expose white
    # space at either end of trimmed text nor empty it.
    if "\x00" in raw:
        # PostgreSQL text cannot hold NUL: refuse, rather than store something else.
        return Rejection(status=MemoryStatus.INVALID_CONTENT, message=messages.content_has_nul())
    content = sanitize_placeholders(raw.strip())
    if len(content) > max_length:
        return Rejection(
            status=MemoryStatus.INVALID_CONTENT,
            message=messages.content_too_long(length=len(content), max_length=max_length),
        )
    return content
