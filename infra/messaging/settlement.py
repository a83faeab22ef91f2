"""How every consumer settles a delivery: one decision from what became of the message.

A handler says what happened (an `Outcome`); `settlement_for` alone turns that into what is
done to the message, and `settle_delivered` (aiormq, the worker) or `settle_incoming`
(aio-pika, the gateway) does it. Requeues are split by whose fault they are: RabbitMQ 4.3+
counts a `basic.reject` toward a quorum queue's delivery limit and not a `basic.nack`, so a
message that failed is rejected (the limit dead-letters a poison message), while one that
waits on something else (Discord away) is nacked and may come back as often as it needs.
"""

from __future__ import annotations

import enum

from aio_pika.abc import AbstractIncomingMessage
from aiormq.abc import DeliveredMessage

from infra.observability import tracing

__all__ = ["Outcome", "Settlement", "settle_delivered", "settle_incoming", "settlement_for"]


class Outcome(enum.Enum):
    """What became of a delivery."""

    # Answered, sent, or a copy already handled: nothing more to do with it.
    HANDLED = "handled"
    # The consumer published its own dead-letter copy (with the reason): the original goes.
    DEAD_LETTERED = "dead_lettered"
    # Never processable (undecodable, not for this queue): the broker dead-letters it, when
    # the queue has a dead-letter exchange, or drops it.
    UNPROCESSABLE = "unprocessable"
    # Handling this delivery failed (its answer not published): again, counted as a failure.
    REDELIVER = "redeliver"
    # Not the message's fault (a service it needs is away): again later, not counted.
    RETRY_LATER = "retry_later"


class Settlement(enum.Enum):
    """What is done to the message: the AMQP method and its `requeue`."""

    ACK = ("ack", None)
    REJECT = ("reject", False)
    REJECT_REQUEUE = ("reject", True)
    NACK_REQUEUE = ("nack", True)

    @property
    def method(self) -> str:
        method: str = self.value[0]
        return method

    @property
    def requeue(self) -> bool:
        return self.value[1] is True


_SETTLEMENTS: dict[Outcome, Settlement] = {
    Outcome.HANDLED: Settlement.ACK,
    Outcome.DEAD_LETTERED: Settlement.ACK,
    Outcome.UNPROCESSABLE: Settlement.REJECT,
    Outcome.REDELIVER: Settlement.REJECT_REQUEUE,
    Outcome.RETRY_LATER: Settlement.NACK_REQUEUE,
}


def settlement_for(outcome: Outcome) -> Settlement:
    """The one ack / reject / requeue decision of every consumer."""
    return _SETTLEMENTS[outcome]


async def settle_delivered(message: DeliveredMessage, outcome: Outcome) -> Settlement:
    """Settles a raw aiormq delivery, without waiting for the socket to drain the frame."""
    settlement = settlement_for(outcome)
    tag = message.delivery_tag
    assert tag is not None
    channel = message.channel
    tracing.settled(settlement.method, delivery_tag=tag)
    if settlement is Settlement.ACK:
        await channel.basic_ack(tag, wait=False)
    elif settlement is Settlement.NACK_REQUEUE:
        await channel.basic_nack(tag, requeue=True, wait=False)
    else:
        await channel.basic_reject(tag, requeue=settlement.requeue, wait=False)
    return settlement


async def settle_incoming(message: AbstractIncomingMessage, outcome: Outcome) -> Settlement:
    """Settles an aio-pika delivery."""
    settlement = settlement_for(outcome)
    if settlement is Settlement.ACK:
        await message.ack()
    elif settlement is Settlement.NACK_REQUEUE:
        await message.nack(requeue=True)
    else:
        await message.reject(requeue=settlement.requeue)
    return settlement
