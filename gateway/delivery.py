"""What happened to one embed or one retraction, and the interface every way of showing
embeds implements."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

from contracts import EmbedRequested

__all__ = ["Delivery", "EmbedSender", "Retraction", "SendResult"]


class Delivery(enum.Enum):
    """The outcome of one send, which decides what happens to the AMQP delivery."""

    SENT = "sent"
    """Posted (or shown): acknowledge."""

    DROPPED = "dropped"
    """Can never succeed (no access, unknown channel, rejected embed): log and acknowledge."""

    RETRY_LATER = "retry_later"
    """Discord or the network failed for longer than the retry budget: requeue the delivery."""


@dataclass(frozen=True, slots=True)
class SendResult:
    """A send's outcome, and the id of the message it posted (when `SENT`): the notice the
    gateway records, so that an erasure can take it back."""

    delivery: Delivery
    message_id: str | None = None


class Retraction(enum.Enum):
    """The outcome of taking a posted notice back."""

    DELETED = "deleted"
    """Deleted, or already gone (a 404): the notice's record goes too."""

    FORBIDDEN = "forbidden"
    """Discord refused (403): the record stays, with `retract_error` `forbidden`."""

    REJECTED = "rejected"
    """Any other refusal (4xx): the record stays, with `retract_error` `rejected`."""

    RETRY_LATER = "retry_later"
    """Discord or the network failed for longer than the retry budget: requeue."""


class EmbedSender(Protocol):
    """Shows one `embed.requested` somewhere, and takes it back: Discord (`DiscordSender`) or
    the terminal (`ConsoleSender`)."""

    async def send(self, request: EmbedRequested) -> SendResult: ...

    async def retract(self, channel_id: str, message_id: str) -> Retraction: ...
