"""Passwords out of everything shown: logs, error messages and command output.

One function, `mask_passwords`, masks the password of every URL in a text (`amqp://u:***@h/`)
and every `password=` parameter (a URL's query, or a libpq `key=value` string). Every path
that shows a URL or an error that might hold one goes through it: the log processor below,
the settings' repr, and the command line's one-line errors.
"""

from __future__ import annotations

import re
from collections.abc import MutableMapping
from typing import Any, Final

__all__ = ["MASK", "mask_passwords", "mask_passwords_in_log"]

MASK: Final = "***"

# `scheme://user:password@`: a password ends at `@`; `/`, `?`, `#` and white space cannot be
# in it unescaped, so a later `@` in a path or query is not taken for its end.
_URL_PASSWORD: Final = re.compile(
    r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^:/?#@\s]*:)[^@\s/?#]*(?P<tail>@)"
)
# `password=…` in a query (up to `&`) or a libpq string (up to white space, or quoted).
_PASSWORD_PARAMETER: Final = re.compile(
    r"(?P<head>\b(?:ssl)?password\s*=\s*)(?:'(?:[^'\\]|\\.)*'|[^&\s]*)", re.IGNORECASE
)


def mask_passwords(text: str) -> str:
    """`text` with every URL's password, and every `password=` value, shown as `***`."""
    if "://" not in text and "assword" not in text:
        return text  # the common case, without a regular expression
    text = _URL_PASSWORD.sub(rf"\g<head>{MASK}\g<tail>", text)
    return _PASSWORD_PARAMETER.sub(rf"\g<head>{MASK}", text)


def mask_passwords_in_log(
    _logger: Any, _method: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """A structlog processor: every string of a log line through `mask_passwords`."""
    for key, value in event.items():
        if isinstance(value, str):
            event[key] = mask_passwords(value)
        elif isinstance(value, BaseException):
            event[key] = mask_passwords(repr(value))
    return event
