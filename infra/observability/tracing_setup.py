"""Turning tracing on: the tracer in use, and the OpenTelemetry SDK the `OTEL_*` variables ask for.

Every span function of `infra.observability.tracing` first reads `STATE.tracer`: None while tracing
is off.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import structlog
from opentelemetry import trace

if TYPE_CHECKING:
    from infra.observability.tracing_sampler import SamplingAhead

__all__ = [
    "INSTRUMENTATION_NAME",
    "STATE",
    "configure_tracing",
    "enabled",
    "use_tracer_provider",
]

INSTRUMENTATION_NAME: Final = "tomori-ltm"

# Values of OTEL_TRACES_EXPORTER this module can build, and the extra that brings them.
_EXPORTERS: Final = ("otlp", "console")
_EXTRA_HINT: Final = "pip install 'tomori-ltm[tracing]'"

log = structlog.get_logger("ltm.tracing")


class _State:
    """The tracer in use: None while tracing is off (the one check of the off path); and how
    a delivery's span is sampled before the SDK is asked for it, when the provider allows."""

    tracer: trace.Tracer | None = None
    ahead: SamplingAhead | None = None


STATE: Final = _State()


def enabled() -> bool:
    return STATE.tracer is not None


def use_tracer_provider(provider: trace.TracerProvider | None) -> None:
    """Traces with `provider` from now on (None: tracing off). For tests, and for a host
    program that keeps its provider to itself; `configure_tracing` is the usual way.

    A delivery's span is sampled ahead (`SamplingAhead`) when `provider` is the SDK's with
    the ids `DrawnTraceIds` draws, as `configure_tracing` builds it, and the SDK counts no
    spans of its own (`OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED`), which would miss those."""
    STATE.tracer = None if provider is None else provider.get_tracer(INSTRUMENTATION_NAME)
    STATE.ahead = None if provider is None else _sampling_ahead(provider)


def _sampling_ahead(provider: trace.TracerProvider) -> SamplingAhead | None:
    if os.environ.get("OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED", "").strip().lower() == "true":
        return None
    try:
        from opentelemetry.sdk.trace import TracerProvider

        from infra.observability.tracing_sampler import DrawnTraceIds, SamplingAhead
    except ImportError:  # a host's own provider, the SDK not installed
        return None
    if not isinstance(provider, TracerProvider) or not isinstance(
        provider.id_generator, DrawnTraceIds
    ):
        return None
    return SamplingAhead(provider.sampler, provider.id_generator)


def configure_tracing(service_name: str, environ: Mapping[str, str] | None = None) -> bool:
    """Turns tracing on when the environment asks for it; True when it is on.

    On when a tracer provider is installed already (the host program's own SDK), or when
    `OTEL_TRACES_EXPORTER` names `otlp` or `console`, or is unset while an OTLP endpoint is
    (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`). Off when
    `OTEL_SDK_DISABLED` is true, or the SDK is not installed (said once in the log).
    `service_name` is the default of `OTEL_SERVICE_NAME`. `OTEL_TRACES_SAMPLER` and
    `OTEL_TRACES_SAMPLER_ARG` choose the sampler (`sampler_from`). The SDK reads the rest
    itself: `OTEL_EXPORTER_OTLP_*`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_BSP_*`.
    """
    if STATE.tracer is not None:
        return True
    env = os.environ if environ is None else environ
    installed = trace.get_tracer_provider()
    if not isinstance(installed, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        use_tracer_provider(installed)
        return True
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = _exporters_asked(env)
    if not exporters:
        return False
    try:
        provider = _sdk_provider(service_name, exporters, env)
    except ImportError as error:
        log.warning(
            "tracing.sdk_missing",
            missing=error.name,
            install=_EXTRA_HINT,
        )
        return False
    trace.set_tracer_provider(provider)
    use_tracer_provider(provider)
    log.info(
        "tracing.on",
        service=service_name,
        exporters=list(exporters),
        sampler=_sampler_of(provider),
    )
    return True


def _sampler_of(provider: trace.TracerProvider) -> str | None:
    sampler = getattr(provider, "sampler", None)
    return None if sampler is None else str(sampler.get_description())


def _exporters_asked(env: Mapping[str, str]) -> tuple[str, ...]:
    named = env.get("OTEL_TRACES_EXPORTER")
    if named is None:
        endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
            "OTEL_EXPORTER_OTLP_ENDPOINT"
        )
        return ("otlp",) if endpoint else ()
    names = tuple(dict.fromkeys(part.strip().lower() for part in named.split(",")))
    unknown = [name for name in names if name and name != "none" and name not in _EXPORTERS]
    if unknown:
        log.warning("tracing.unknown_exporters_ignored", unknown=unknown)
    return tuple(name for name in names if name in _EXPORTERS)


def _sdk_provider(
    service_name: str, exporters: Sequence[str], env: Mapping[str, str]
) -> trace.TracerProvider:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from infra.observability.tracing_resource import process_resource
    from infra.observability.tracing_sampler import DrawnTraceIds, sampler_from

    # Spans still queued are exported at exit (the provider's own atexit hook).
    provider = TracerProvider(
        resource=process_resource(service_name),
        sampler=sampler_from(env),
        id_generator=DrawnTraceIds(),
    )
    for name in exporters:
        provider.add_span_processor(BatchSpanProcessor(_exporter(name, env)))
    return provider


def _exporter(name: str, env: Mapping[str, str]) -> Any:
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    )
    if protocol.strip() == "grpc":
        # Not in the `tracing` extra (grpcio is large): installed by those who want it.
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcSpanExporter,
        )

        return GrpcSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()
