"""What happened to one embed, and the interface every way of showing embeds implements."""

from __future__ import annotations

import enum
from typing import Protocol

from contracts import EmbedRequested

__all__ = ["Delivery", "EmbedSender"]


class Delivery(enum.Enum):
    """The outcome of one send, which decides what happens to the AMQP delivery."""

    SENT = "sent"
    """Posted (or shown): acknowledge."""

    DROPPED = "dropped"
    """Can never succeed (no access, unknown channel, rejected embed): log and acknowledge."""

    RETRY_LATER = "retry_later"
    """Discord or the network failed for longer than the retry budget: requeue the delivery."""


class EmbedSender(Protocol):
    """Shows one `embed.requested` somewhere: Discord (`DiscordSender`) or the terminal."""

    async def send(self, request: EmbedRequested) -> Delivery: ...
