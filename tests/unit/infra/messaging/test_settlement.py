"""The one ack / reject / requeue decision, and how it is applied to aiormq and aio-pika
deliveries (fakes of the channel and the message)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from aio_pika.abc import AbstractIncomingMessage
from aiormq.abc import DeliveredMessage

from infra.messaging.settlement import (
    Outcome,
    Settlement,
    settle_delivered,
    settle_incoming,
    settlement_for,
)


@dataclass
class RecordingChannel:
    """An aiormq channel that records the settling frames it is asked to send."""

    frames: list[tuple[Any, ...]] = field(default_factory=list)

    async def basic_ack(self, tag: int, *, wait: bool = True) -> None:
        self.frames.append(("ack", tag, wait))

    async def basic_nack(self, tag: int, *, requeue: bool = True, wait: bool = True) -> None:
        self.frames.append(("nack", tag, requeue, wait))

    async def basic_reject(self, tag: int, *, requeue: bool = True, wait: bool = True) -> None:
        self.frames.append(("reject", tag, requeue, wait))


@dataclass
class RawDelivery:
    channel: RecordingChannel
    delivery_tag: int = 7
    exchange: str = "ltm.tool_calls"


@dataclass
class RecordingIncoming:
    """An aio-pika incoming message that records how it was settled."""

    settled: list[tuple[Any, ...]] = field(default_factory=list)

    async def ack(self) -> None:
        self.settled.append(("ack",))

    async def nack(self, requeue: bool = True) -> None:
        self.settled.append(("nack", requeue))

    async def reject(self, requeue: bool = False) -> None:
        self.settled.append(("reject", requeue))


def test_every_outcome_has_one_settlement() -> None:
    assert {outcome: settlement_for(outcome) for outcome in Outcome} == {
        Outcome.HANDLED: Settlement.ACK,
        # The consumer's own copy, with its reason, is in the dead-letter queue already.
        Outcome.DEAD_LETTERED: Settlement.ACK,
        Outcome.UNPROCESSABLE: Settlement.REJECT,
        # A failure counts toward a quorum queue's delivery limit (basic.reject, 4.3+) ...
        Outcome.REDELIVER: Settlement.REJECT_REQUEUE,
        # ... waiting on something else does not (basic.nack).
        Outcome.RETRY_LATER: Settlement.NACK_REQUEUE,
    }


@pytest.mark.parametrize(
    ("outcome", "frame"),
    [
        (Outcome.HANDLED, ("ack", 7, False)),
        (Outcome.DEAD_LETTERED, ("ack", 7, False)),
        (Outcome.UNPROCESSABLE, ("reject", 7, False, False)),
        (Outcome.REDELIVER, ("reject", 7, True, False)),
        (Outcome.RETRY_LATER, ("nack", 7, True, False)),
    ],
)
async def test_a_raw_delivery_is_settled_with_one_frame_without_waiting_for_the_socket(
    outcome: Outcome, frame: tuple[Any, ...]
) -> None:
    channel = RecordingChannel()
    settled = await settle_delivered(cast(DeliveredMessage, RawDelivery(channel)), outcome)
    assert settled is settlement_for(outcome)
    assert channel.frames == [frame]


@pytest.mark.parametrize(
    ("outcome", "call"),
    [
        (Outcome.HANDLED, ("ack",)),
        (Outcome.DEAD_LETTERED, ("ack",)),
        (Outcome.UNPROCESSABLE, ("reject", False)),
        (Outcome.REDELIVER, ("reject", True)),
        (Outcome.RETRY_LATER, ("nack", True)),
    ],
)
async def test_an_aio_pika_delivery_is_settled_the_same_way(
    outcome: Outcome, call: tuple[Any, ...]
) -> None:
    message = RecordingIncoming()
    await settle_incoming(cast(AbstractIncomingMessage, message), outcome)
    assert message.settled == [call]


def test_a_settlement_names_its_amqp_method_and_requeue() -> None:
    assert [(s.method, s.requeue) for s in Settlement] == [
        ("ack", False),
        ("reject", False),
        ("reject", True),
        ("nack", True),
    ]
