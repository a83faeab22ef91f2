"""What watches a delivery without deciding anything: the points of its handling where the
worker's metrics, tracing and failpoints hang (`DeliveryHooks`), and those three.

`worker.runtime.delivery` reaches each point once, where it happens; `Hooks` hands every
point on to the worker's three. No hook raises: none may change what becomes of a call.
"""

from __future__ import annotations

import contextlib
import time
from contextlib import AbstractContextManager
from typing import Final, Protocol

from aiormq.abc import DeliveredMessage

from contracts import ToolCallCompleted, Topology
from infra.messaging.settlement import Outcome
from infra.observability import tracing
from worker import failpoints
from worker.adapters.metrics import WorkerMetrics
from worker.service import Processed

__all__ = ["DeliveryHooks", "FailpointHooks", "Hooks", "MetricsHooks", "NoHooks", "TracingHooks"]

_UNTRACED: Final[contextlib.nullcontext[None]] = contextlib.nullcontext()


class DeliveryHooks(Protocol):
    """The points of a delivery's handling, in the order they come."""

    def processing(self, message: DeliveredMessage) -> AbstractContextManager[object]:
        """Entered as the delivery comes, left once it is settled."""
        ...

    def after_commit(self, processed: Processed) -> None:
        """The call's batch committed what it wrote; the result is not published yet."""
        ...

    def after_publish(
        self, result: ToolCallCompleted, processed: Processed | None, delivered_at: float
    ) -> None:
        """The call's result is with the broker: `processed`'s, or (None) an answer the
        database could not hold. `delivered_at`: `time.perf_counter()` at the delivery."""
        ...

    def after_mark(self, processed: Processed) -> None:
        """The call's outbox rows were handed to the marking, marked or not."""
        ...

    def before_dead_letter(self, cause: str, reason: str) -> None:
        """The delivery is about to be copied to the dead-letter exchange."""
        ...

    def left_for_redelivery(self, error: Exception) -> None:
        """Handling the delivery failed (a publish lost or refused): it goes back."""
        ...

    def after_ack(
        self, outcome: Outcome, delivered_at: float, processed: Processed | None, cause: str | None
    ) -> None:
        """The delivery is acked: answered (`processed`) or dead-lettered (`cause`)."""
        ...


class NoHooks:
    """Every point a no-op: a hook overrides the points it watches."""

    def processing(self, message: DeliveredMessage) -> AbstractContextManager[object]:
        return _UNTRACED

    def after_commit(self, processed: Processed) -> None:
        return None

    def after_publish(
        self, result: ToolCallCompleted, processed: Processed | None, delivered_at: float
    ) -> None:
        return None

    def after_mark(self, processed: Processed) -> None:
        return None

    def before_dead_letter(self, cause: str, reason: str) -> None:
        return None

    def left_for_redelivery(self, error: Exception) -> None:
        return None

    def after_ack(
        self, outcome: Outcome, delivered_at: float, processed: Processed | None, cause: str | None
    ) -> None:
        return None


class MetricsHooks(NoHooks):
    """The calls' latencies and counts (`WorkerMetrics`)."""

    def __init__(self, metrics: WorkerMetrics) -> None:
        self._metrics = metrics

    def after_publish(
        self, result: ToolCallCompleted, processed: Processed | None, delivered_at: float
    ) -> None:
        # What the user waits for ends here: the result is with the broker.
        self._metrics.latency.observe(time.perf_counter() - delivered_at)
        if processed is None:
            self._metrics.calls.labels(result.tool_name, result.status.value, "false").inc()

    def after_ack(
        self, outcome: Outcome, delivered_at: float, processed: Processed | None, cause: str | None
    ) -> None:
        metrics = self._metrics
        metrics.ack_latency.observe(time.perf_counter() - delivered_at)
        if processed is not None:
            result = processed.result
            metrics.calls.labels(
                result.tool_name, result.status.value, str(processed.replayed).lower()
            ).inc()
        elif cause is not None:
            metrics.dead_lettered.labels(cause).inc()


class TracingHooks(NoHooks):
    """The delivery's CONSUMER span, failed when the call is dead-lettered or goes back."""

    def __init__(self, topology: Topology) -> None:
        self._queue = topology.worker_queue

    def processing(self, message: DeliveredMessage) -> AbstractContextManager[object]:
        """Current from the delivery to its settlement; a shared no-op while tracing is off."""
        properties = message.header.properties
        return tracing.processing(
            headers=properties.headers,
            exchange=message.exchange,
            routing_key=message.routing_key,
            queue=self._queue,
            message_id=properties.message_id,
            conversation_id=properties.correlation_id,
        )

    def before_dead_letter(self, cause: str, reason: str) -> None:
        tracing.failed(tracing.current_span(), cause, reason)

    def left_for_redelivery(self, error: Exception) -> None:
        tracing.failed(tracing.current_span(), type(error).__qualname__, "left for redelivery")


class FailpointHooks(NoHooks):
    """Where a crash test kills the worker (`worker.failpoints`), for a call whose batch
    wrote it: after the commit, after the publish of its rows, after their marking."""

    def after_commit(self, processed: Processed) -> None:
        failpoints.reach("after_commit")

    def after_publish(
        self, result: ToolCallCompleted, processed: Processed | None, delivered_at: float
    ) -> None:
        if processed is not None and processed.outbox:
            failpoints.reach("after_publish")

    def after_mark(self, processed: Processed) -> None:
        failpoints.reach("after_mark")


class Hooks:
    """Several hooks as one: the span of `traced_by` around the delivery, and each point
    handed to every hook in order."""

    def __init__(self, traced_by: DeliveryHooks, *others: DeliveryHooks) -> None:
        self.processing = traced_by.processing
        self._each: tuple[DeliveryHooks, ...] = (traced_by, *others)

    def after_commit(self, processed: Processed) -> None:
        for hooks in self._each:
            hooks.after_commit(processed)

    def after_publish(
        self, result: ToolCallCompleted, processed: Processed | None, delivered_at: float
    ) -> None:
        for hooks in self._each:
            hooks.after_publish(result, processed, delivered_at)

    def after_mark(self, processed: Processed) -> None:
        for hooks in self._each:
            hooks.after_mark(processed)

    def before_dead_letter(self, cause: str, reason: str) -> None:
        for hooks in self._each:
            hooks.before_dead_letter(cause, reason)

    def left_for_redelivery(self, error: Exception) -> None:
        for hooks in self._each:
            hooks.left_for_redelivery(error)

    def after_ack(
        self, outcome: Outcome, delivered_at: float, processed: Processed | None, cause: str | None
    ) -> None:
        for hooks in self._each:
            hooks.after_ack(outcome, delivered_at, processed, cause)
