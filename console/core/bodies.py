"""A dead letter's body as a person reads it: indented JSON, else text, else bytes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

import orjson

__all__ = ["SHOWN_BYTES", "ShownBody", "shown_body"]

# More than a tool call ever holds (LTM_MAX_MESSAGE_BYTES is 256 KiB): the rest is cut.
SHOWN_BYTES: Final = 64 * 1024
_ROW: Final = 16


@dataclass(frozen=True, slots=True)
class ShownBody:
    kind: Literal["json", "text", "bytes"]
    text: str
    size: int
    cut: bool


def shown_body(body: bytes) -> ShownBody:
    """JSON indented by two; not JSON but UTF-8 as the text it is; anything else as a hex
    dump (offset, bytes, printable ASCII). A body over `SHOWN_BYTES` is cut, unparsed."""
    cut = len(body) > SHOWN_BYTES
    if not cut:
        try:
            parsed = orjson.loads(body)
        except orjson.JSONDecodeError:
            pass
        else:
            indented = orjson.dumps(parsed, option=orjson.OPT_INDENT_2).decode()
            return ShownBody("json", indented, len(body), cut=False)
    shown = body[:SHOWN_BYTES]
    text = _utf8(shown, cut)
    if text is None:
        return ShownBody("bytes", _hex_dump(shown), len(body), cut)
    return ShownBody("text", text, len(body), cut)


def _utf8(data: bytes, cut: bool) -> str | None:
    # A cut may split the last character (up to 3 of its bytes): the text before it.
    for dropped in range(4 if cut else 1):
        try:
            return data[: len(data) - dropped].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return None


def _hex_dump(data: bytes) -> str:
    lines = []
    for offset in range(0, len(data), _ROW):
        row = data[offset : offset + _ROW]
        printable = "".join(chr(byte) if 0x20 <= byte < 0x7F else "." for byte in row)
        lines.append(f"{offset:08x}  {row.hex(' '):<{_ROW * 3 - 1}}  {printable}")
    return "\n".join(lines)
