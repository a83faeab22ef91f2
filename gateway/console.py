"""Console mode: without `DISCORD_TOKEN`, embeds are printed to the terminal instead of sent.

Each line of the embed starts with a bar in the embed's colour (24-bit ANSI) when the stream
is a terminal, and with `|` otherwise; then the title, description, fields and footer.
Each printed embed gets a message id of its own (a snowflake of the time it was printed), so
that its notice is recorded and an erasure's retraction, printed as
`[retracted <channel>/<message>]`, names it.
"""

from __future__ import annotations

import itertools
import sys
import time
from typing import Final, TextIO

from contracts import EmbedPayload, EmbedRequested
from gateway.delivery import Delivery, Retraction, SendResult
from infra.observability.logs import get_logger

__all__ = ["ConsoleSender", "render_embed"]

log = get_logger(__name__)

_RESET = "\x1b[0m"
_BOLD = "\x1b[1m"
_DIM = "\x1b[2m"
# Discord's epoch (2015-01-01), in milliseconds: the printed messages' ids are snowflakes.
_DISCORD_EPOCH_MS: Final = 1_420_070_400_000


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
        # The low 22 bits count within the process, as Discord's worker and sequence bits do.
        now_ms = time.time_ns() // 1_000_000 - _DISCORD_EPOCH_MS
        self._message_ids = itertools.count(now_ms << 22)

    async def send(self, request: EmbedRequested) -> SendResult:
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
        return SendResult(Delivery.SENT, str(next(self._message_ids)))

    async def retract(self, channel_id: str, message_id: str) -> Retraction:
        stream = self._stream if self._stream is not None else sys.stdout
        stream.write(f"[retracted {channel_id}/{message_id}]\n")
        stream.flush()
        log.info("notice.retracted", channel_id=channel_id, message_id=message_id)
        return Retraction.DELETED
