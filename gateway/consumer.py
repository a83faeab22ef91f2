"""What every consumer of the gateway shares: consume a queue, decode, hand over, settle.

A subclass says which events it takes (`accepts`), how its log lines begin (`log_prefix`),
whether each delivery is a CONSUMER span (`traced`), and what to do with an event
(`_handle`, which returns an `infra.messaging.settlement.Outcome`). An undecodable message, or an
event that does not belong on the queue, is logged and rejected without requeue, here; every
settlement goes through `settle_incoming`, the one decision all consumers share.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Iterator
from typing import ClassVar

from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractQueue
from opentelemetry.trace import Span

from contracts import Event, InvalidEnvelope, Topology, decode_event
from gateway.inflight import InFlight
from gateway.metrics import GatewayMetrics
from infra.messaging.settlement import Outcome, settle_incoming
from infra.observability import tracing
from infra.observability.logs import error_summary, get_logger

__all__ = ["EventConsumer"]

log = get_logger("gateway.consumer")


class EventConsumer(abc.ABC):
    """Consumes one or more queues on `channel`, with manual acks."""

    log_prefix: ClassVar[str]
    accepts: ClassVar[tuple[type[Event], ...]]
    traced: ClassVar[bool] = False

    def __init__(
        self, channel: AbstractChannel, topology: Topology, metrics: GatewayMetrics | None
    ) -> None:
        """`channel` should have a prefetch (QoS) set: it bounds the deliveries in flight."""
        self._channel = channel
        self._topology = topology
        self._metrics = metrics or GatewayMetrics()
        self._inflight = InFlight()
        # Consumer tags by queue name.
        self._consuming: dict[str, tuple[AbstractQueue, str]] = {}

    @property
    def in_flight(self) -> int:
        return len(self._inflight)

    async def _consume(self, queue: AbstractQueue) -> None:
        tag = await queue.consume(self._on_message)
        self._consuming[queue.name] = (queue, tag)

    async def stop(self, grace_s: float = 5.0) -> None:
        """Stops taking deliveries, then waits up to `grace_s` for those being handled."""
        for name, (queue, tag) in list(self._consuming.items()):
            try:
                await queue.cancel(tag)
            except Exception as error:  # the channel may already be closed
                log.warning(
                    f"{self.log_prefix}.cancel_failed", queue=name, error=error_summary(error)
                )
        self._consuming.clear()
        cancelled = await self._inflight.drain(grace_s)
        if cancelled:
            log.warning(f"{self.log_prefix}.stop_cancelled_deliveries", count=cancelled)

    @contextlib.contextmanager
    def _span(self, message: AbstractIncomingMessage) -> Iterator[Span | None]:
        if not self.traced:
            yield None
            return
        with tracing.processing(
            headers=message.headers,
            exchange=message.exchange,
            routing_key=message.routing_key,
            message_id=message.message_id,
            conversation_id=message.correlation_id,
            # An event without a context is a call's the worker did not sample.
            starts_trace=False,
        ) as span:
            yield span

    async def _on_message(self, message: AbstractIncomingMessage) -> None:
        with self._inflight.track(), self._span(message) as span:
            event = self._accepted(message, span)
            outcome = Outcome.UNPROCESSABLE if event is None else await self._handle(event, message)
            await settle_incoming(message, outcome)

    def _accepted(self, message: AbstractIncomingMessage, span: Span | None) -> Event | None:
        """The event the message holds, when it is one this consumer takes; else logged."""
        try:
            event = decode_event(message.body)
        except InvalidEnvelope as error:
            log.error(
                f"{self.log_prefix}.undecodable",
                reason=str(error),
                message_id=message.message_id,
                tool_call_id=message.correlation_id,
                routing_key=message.routing_key,
            )
            tracing.failed(span, "undecodable", str(error))
            return None
        if not isinstance(event, self.accepts):
            log.error(
                f"{self.log_prefix}.unexpected_event",
                event_type=event.event_type,
                event_id=str(event.event_id),
                tool_call_id=event.correlation_id,
            )
            tracing.failed(span, "unexpected_event", event.event_type)
            return None
        return event

    @abc.abstractmethod
    async def _handle(self, event: Event, message: AbstractIncomingMessage) -> Outcome:
        """What became of the event; the base settles the message accordingly."""
