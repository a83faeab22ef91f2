"""Prometheus metrics of the worker (served by `infra.observability.metrics.serve_metrics`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from infra.observability.metrics import process_registry

__all__ = ["WorkerMetrics"]

_SECONDS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


@dataclass
class WorkerMetrics:
    """One registry per worker, so that several workers in one process (tests) do not clash."""

    registry: CollectorRegistry = field(default_factory=process_registry)

    def __post_init__(self) -> None:
        self.calls = Counter(
            "ltm_tool_calls_total",
            "Tool calls answered, by tool and status (replayed: answered from the idempotency "
            "record).",
            ["tool", "status", "replayed"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "ltm_tool_call_seconds",
            "From delivery to the result published (confirmed by the broker), per tool call.",
            buckets=_SECONDS,
            registry=self.registry,
        )
        # The ack waits until the call's outbox rows are marked published, which lingers to
        # share one UPDATE among the calls finishing together: not a wait anyone sees.
        self.ack_latency = Histogram(
            "ltm_tool_call_ack_seconds",
            "From delivery to ack, per delivery acked (answered or dead-lettered).",
            buckets=_SECONDS,
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "ltm_tool_calls_in_flight", "Deliveries being processed.", registry=self.registry
        )
        self.outbox_backlog = Gauge(
            "ltm_outbox_backlog", "Outbox rows not yet published.", registry=self.registry
        )
        self.dead_lettered = Counter(
            "ltm_dead_lettered_total",
            "Tool calls sent to the dead-letter queue, by cause.",
            ["cause"],
            registry=self.registry,
        )
        self.outbox_swept = Counter(
            "ltm_outbox_swept_total",
            "Outbox rows published by the sweep (left behind by a crash or a lost broker).",
            registry=self.registry,
        )
        self.batch_size = Histogram(
            "ltm_transaction_calls",
            "Tool calls per database transaction.",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128),
            registry=self.registry,
        )
        self.db_retries = Counter(
            "ltm_db_retries_total", "Transient database faults retried.", registry=self.registry
        )
