"""A publisher-confirms channel that a refused publish replaces.

Measured on RabbitMQ 3.10 (a cluster of three, a quorum queue of three members): a channel
whose first publish to a quorum queue comes while that queue's leader is down gets a
`basic.nack` for every later publish to it, for as long as the channel lives, though a new
leader is elected within seconds; a new channel on the same connection is acked at once. A
publisher that kept its channel would answer nothing until it reconnected for some other
reason. So every long-lived publisher here (the worker's events, the gateway's tool calls)
holds a `ConfirmingChannel`, tells it of each nack (`refused`), and publishes on whatever
channel it holds next. On a broker without that fault a nack means the queue refused the
message (a full queue that rejects publishes): a new channel changes nothing and costs one
channel open per `renew_every_s` at most.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

import aiormq
from aio_pika.abc import AbstractChannel, AbstractConnection

from infra.observability.logs import error_summary, get_logger

__all__ = ["ConfirmingChannel"]

log = get_logger("ltm.amqp")

RENEW_EVERY_S: Final = 0.5

T = TypeVar("T")


class ConfirmingChannel:
    """The current channel with publisher confirms on `connection`, and its aiormq channel.

    `on_lost` is called when the broker (or the connection's loss) closes the current
    channel: not when a refused publish made it retire. Use `open` to make one.
    """

    def __init__(
        self,
        connection: AbstractConnection,
        *,
        on_lost: Callable[[], object] | None = None,
        renew_every_s: float = RENEW_EVERY_S,
    ) -> None:
        self._connection = connection
        self._on_lost = on_lost
        self._renew_every_s = renew_every_s
        self._channel: AbstractChannel | None = None
        self._raw: aiormq.Channel | None = None
        self._renewing: asyncio.Task[None] | None = None
        self._retiring: set[asyncio.Task[None]] = set()
        self._renewed_at = float("-inf")
        self._closed = False
        self.renewals = 0

    @classmethod
    async def open(
        cls,
        connection: AbstractConnection,
        *,
        on_lost: Callable[[], object] | None = None,
        renew_every_s: float = RENEW_EVERY_S,
    ) -> ConfirmingChannel:
        confirming = cls(connection, on_lost=on_lost, renew_every_s=renew_every_s)
        confirming._use(*await confirming._open_channel())
        return confirming

    @property
    def channel(self) -> AbstractChannel:
        assert self._channel is not None, "not opened"
        return self._channel

    @property
    def raw(self) -> aiormq.Channel:
        """The aiormq channel under `channel`: its `basic_publish(wait=False)` does not hold
        the channel until the socket drains, as aio-pika's `Exchange.publish` does."""
        assert self._raw is not None, "not opened"
        return self._raw

    def refused(self, channel: AbstractChannel | aiormq.abc.AbstractChannel) -> bool:
        """The broker nacked a publish on `channel` (the aio-pika channel or its aiormq one).
        Unless it was replaced already, a new channel replaces it, `renew_every_s` after the
        last replacement at the soonest (a leader may still be being elected). Whether this
        nack is the one that replaces it."""
        if self._closed or channel not in (self._channel, self._raw):
            return False
        if self._renewing is not None and not self._renewing.done():
            return False
        self._renewing = asyncio.create_task(self._renew(), name="renew-confirming-channel")
        return True

    async def confirmed(
        self,
        publish: Callable[[AbstractChannel, aiormq.Channel], Awaitable[T]],
        *,
        within_s: float,
    ) -> T:
        """`await publish(channel, raw)` on the current channel; when the broker nacks it, again
        on the channel that replaces it, until `within_s` has passed: then the nack is raised.
        (A publisher that gives up at once would burn a call's deliveries on a channel the
        broker is bound to refuse.)"""
        deadline = time.monotonic() + within_s
        while True:
            channel, raw = self.channel, self.raw
            try:
                return await publish(channel, raw)
            except aiormq.exceptions.DeliveryError:
                self.refused(channel)
                if not await self.replaced(channel, timeout=deadline - time.monotonic()):
                    raise
                log.info("amqp.refused_publish_sent_again")
            except (aiormq.exceptions.ChannelClosed, aiormq.exceptions.ChannelInvalidStateError):
                # Closed under it because another publish's nack retired it: again, on the
                # new one. A channel the broker closed is still the current one: raised.
                if self._closed or channel is self._channel or time.monotonic() >= deadline:
                    raise
                log.info("amqp.publish_on_retired_channel_sent_again")

    async def replaced(
        self, channel: AbstractChannel | aiormq.abc.AbstractChannel, *, timeout: float
    ) -> bool:
        """Waits (up to `timeout`) for the renewal a nack on `channel` started; whether the
        channel held now is another one. False when no renewal is coming (closed, or the new
        channel could not be opened)."""
        renewing = self._renewing
        if channel in (self._channel, self._raw) and renewing is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(renewing), max(timeout, 0.0))
        return not self._closed and channel not in (self._channel, self._raw)

    async def _renew(self) -> None:
        # Pacing, not a wait for a condition: at most one new channel per `renew_every_s`.
        await asyncio.sleep(max(0.0, self._renewed_at + self._renew_every_s - time.monotonic()))
        retired = self._channel
        try:
            channel, raw = await self._open_channel()
        except (aiormq.exceptions.AMQPError, OSError, RuntimeError) as error:
            # The connection is going away: whoever holds it starts over when it does.
            log.warning("amqp.confirming_channel_not_renewed", error=error_summary(error))
            return
        if self._closed:
            with contextlib.suppress(aiormq.exceptions.AMQPError, OSError, RuntimeError):
                await channel.close()
            return
        self._use(channel, raw)
        self._renewed_at = time.monotonic()
        self.renewals += 1
        log.warning("amqp.confirming_channel_renewed", reason="a publish was nacked")
        if retired is not None:
            # Closed apart: this renewal is over once the new channel is in use, so that a
            # nack on the new one already starts the next.
            retiring = asyncio.create_task(self._retire(retired), name="retire-channel")
            self._retiring.add(retiring)
            retiring.add_done_callback(self._retiring.discard)

    async def _open_channel(self) -> tuple[AbstractChannel, aiormq.Channel]:
        channel = await self._connection.channel(publisher_confirms=True)
        raw = await channel.get_underlay_channel()
        assert isinstance(raw, aiormq.Channel)  # `wait` is the concrete channel's
        return channel, raw

    def _use(self, channel: AbstractChannel, raw: aiormq.Channel) -> None:
        self._channel, self._raw = channel, raw
        channel.close_callbacks.add(self._lost)

    def _lost(self, channel: Any, *_: Any) -> None:
        if channel is self._channel and not self._closed and self._on_lost is not None:
            self._on_lost()

    async def _retire(self, channel: AbstractChannel) -> None:
        # Publishes still waiting for their confirm on it fail, as any lost channel's would;
        # their callers publish again, on the new one.
        channel.close_callbacks.discard(self._lost)
        with contextlib.suppress(aiormq.exceptions.AMQPError, OSError, RuntimeError):
            await channel.close()

    async def close(self) -> None:
        """Closes the current channel (no `on_lost`) and stops any renewal under way."""
        self._closed = True
        if self._renewing is not None:
            self._renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewing
        if self._retiring:
            await asyncio.gather(*self._retiring, return_exceptions=True)
        if self._channel is not None and not self._channel.is_closed:
            await self._retire(self._channel)
