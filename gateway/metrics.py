"""Prometheus metrics of a gateway (served by `infra.observability.metrics.serve_metrics`; `ltm
gateway`
serves them on `LTM_GATEWAY_METRICS_PORT`, a bot may serve `gateway.metrics.registry`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from prometheus_client import CollectorRegistry, Counter

from infra.observability.metrics import process_registry

__all__ = ["EmbedFailure", "GatewayMetrics"]

EmbedFailure = Literal["forbidden", "not_found", "rejected", "unavailable", "crashed"]


@dataclass
class GatewayMetrics:
    """One registry per gateway, so that several gateways in one process (tests) do not clash."""

    registry: CollectorRegistry = field(default_factory=process_registry)

    def __post_init__(self) -> None:
        self.results = Counter(
            "ltm_gateway_results_total",
            "Results taken from this process's shard queues; waiting: whether one of its tool "
            "calls was waiting for it (false: it timed out, or was made by another process).",
            ["waiting"],
            registry=self.registry,
        )
        self.embeds = Counter(
            "ltm_gateway_embeds_total",
            "Embeds handled, by outcome: sent (posted, or printed in console mode), dropped "
            "(can never be posted), retry_later (requeued after Discord stayed unreachable).",
            ["outcome"],
            registry=self.registry,
        )
        self.embed_failures = Counter(
            "ltm_gateway_embed_failures_total",
            "Embeds not posted, by cause: forbidden, not_found, rejected (another 4xx), "
            "unavailable (5xx, network or rate limit past the retry budget), crashed (a bug).",
            ["cause"],
            registry=self.registry,
        )
        self.cache_invalidations = Counter(
            "ltm_gateway_cache_invalidations_total",
            "Cache invalidations received, by cache and whether this process held the entry.",
            ["cache", "held"],
            registry=self.registry,
        )

    def embed_failed(self, cause: EmbedFailure) -> None:
        self.embed_failures.labels(cause).inc()
