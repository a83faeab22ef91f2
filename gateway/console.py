"""Console mode: without `DISCORD_TOKEN`, embeds are printed to the terminal instead of sent.

Each line of the embed starts with a bar in the embed's colour (24-bit ANSI) when the stream
is a terminal, and with `|` otherwise; then the title, description, fields and footer.
"""

from __future__ import annotations

import sys
from typing import TextIO

from contracts import EmbedPayload, EmbedRequested
from gateway.delivery import Delivery
from infra.observability.logs import get_logger

__all__ = ["ConsoleSender", "render_embed"]

log = get_logger(__name__)

_RESET = "\x1b[0m"
_BOLD = "\x1b[1m"
_DIM = "\x1b[2m"


def _bar(color: int, ansi: bool) -> str:
    if not ansi:
        return "| "
    red, green, blue = (color >> 16) & 0xFF, (color >> 8) & 0xFF, color & 0xFF
    return f"\x1b[38;2;{red};{green};{blue}m▌{_RESET} "


def render_embed(payload: EmbedPayload, *, ansi: bool, heading: str | None = None) -> str:
    """The embed as text lines, each behind a bar in its colour; `heading` goes above it."""
    bar = _bar(payload.color, ansi)

    def styled(text: str, style: str) -> str:
        return f"{style}{text}{_RESET}" if ansi else text

    lines: list[str] = []
    if heading:
        lines.append(styled(heading, _DIM))
    lines.append(bar + styled(payload.title, _BOLD))
    lines.extend(bar + line for line in payload.description.splitlines())
    for field in payload.fields:
        lines.append(bar + styled(field.name, _BOLD))
        lines.extend(bar + "  " + line for line in field.value.splitlines())
    if payload.footer:
        lines.extend(bar + styled(line, _DIM) for line in payload.footer.splitlines())
    return "\n".join(lines) + "\n"


class ConsoleSender:
    """An `EmbedSender` that writes each embed to a stream (stdout by default)."""

    def __init__(self, stream: TextIO | None = None, *, ansi: bool | None = None) -> None:
        self._stream = stream
        self._ansi = ansi

    async def send(self, request: EmbedRequested) -> Delivery:
        stream = self._stream if self._stream is not None else sys.stdout
        ansi = self._ansi if self._ansi is not None else stream.isatty()
        heading = f"[embed to channel {request.channel_id} · {request.kind}]"
        stream.write(render_embed(request.embed, ansi=ansi, heading=heading))
        stream.flush()
        log.info(
            "embed.printed",
            tool_call_id=request.tool_call_id,
            event_id=str(request.event_id),
            channel_id=request.channel_id,
        )
        return Delivery.SENT
