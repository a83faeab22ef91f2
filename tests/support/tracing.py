"""This test process traced, for one test: into memory, or by a provider of the test's own;
tracing is off again afterwards, whatever the test did."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Sampler

from infra.observability import tracing
from infra.observability.tracing_sampler import DrawnTraceIds

__all__ = ["spans_in_memory", "traced_by"]


@contextmanager
def traced_by(provider: TracerProvider) -> Iterator[TracerProvider]:
    """Traces with `provider` for the block, then turns tracing off and shuts it down."""
    tracing.use_tracer_provider(provider)
    try:
        yield provider
    finally:
        tracing.use_tracer_provider(None)
        provider.shutdown()


@contextmanager
def spans_in_memory(
    sampler: Sampler | None = None, *, ahead: bool = True
) -> Iterator[InMemorySpanExporter]:
    """Traced for the block (with `sampler`, else the SDK's default); its spans kept.
    `ahead`: deliveries sampled ahead, as in a process that configured its own tracing; else
    by the SDK alone, as under a host program's provider."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler, id_generator=DrawnTraceIds() if ahead else None)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with traced_by(provider):
        yield exporter
