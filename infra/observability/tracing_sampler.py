"""The sampler of the SDK's tracer provider: which calls are traced (`OTEL_TRACES_SAMPLER`).

Imported only once tracing is configured: the SDK is the `tracing` extra's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Final

import structlog
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    Decision,
    ParentBased,
    Sampler,
    SamplingResult,
    TraceIdRatioBased,
)
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    TraceFlags,
    TraceState,
)
from opentelemetry.util.types import Attributes

from infra.observability.tracing import LeftOutSpan

__all__ = [
    "DEFAULT_SAMPLER",
    "DEFAULT_SAMPLER_RATIO",
    "DrawnTraceIds",
    "SamplingAhead",
    "sampler_from",
]

# What `OTEL_TRACES_SAMPLER` unset means here (the SDK's own default samples every call):
# one new trace in a hundred, and every call whose bot sampled it. What that costs the worker, and
# what a smaller ratio saves, is measured by the bench (bench/RESULTS.md, "What tracing costs
# the worker"); `OTEL_TRACES_SAMPLER_ARG` alone changes the ratio.
DEFAULT_SAMPLER: Final = "parentbased_traceidratio"
DEFAULT_SAMPLER_RATIO: Final = 0.01
# The SDK's names (`OTEL_TRACES_SAMPLER`) that this module builds.
_SAMPLERS: Final = (
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
)

log = structlog.get_logger("ltm.tracing")


def sampler_from(env: Mapping[str, str]) -> Sampler:
    """The sampler `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG` name, the SDK's names
    and meaning; unset, `parentbased_traceidratio` at `DEFAULT_SAMPLER_RATIO`.

    A parent-based sampler follows the sampled flag of the context a message carries (the
    bot's choice), and samples a new trace linked to a sampled span (`ltm dlq replay`'s, of
    a call dead-lettered in a sampled trace), so that no link to a sampled trace is lost.
    """
    name = env.get("OTEL_TRACES_SAMPLER", "").strip().lower() or DEFAULT_SAMPLER
    if name not in _SAMPLERS:
        log.warning("tracing.unknown_sampler_ignored", sampler=name, instead=DEFAULT_SAMPLER)
        name = DEFAULT_SAMPLER
    if name.endswith("always_on"):
        root: Sampler = ALWAYS_ON
    elif name.endswith("always_off"):
        root = ALWAYS_OFF
    else:
        root = TraceIdRatioBased(_ratio(env.get("OTEL_TRACES_SAMPLER_ARG")))
    if not name.startswith("parentbased_"):
        return root
    return _ParentBased(_SampledLinks(root))


def _ratio(argument: str | None) -> float:
    if argument is None or not argument.strip():
        return DEFAULT_SAMPLER_RATIO
    try:
        ratio = float(argument)
    except ValueError:
        ratio = -1.0
    if not 0.0 <= ratio <= 1.0:
        log.warning("tracing.sampler_ratio_ignored", ratio=argument, instead=DEFAULT_SAMPLER_RATIO)
        return DEFAULT_SAMPLER_RATIO
    return ratio


class _SampledLinks(Sampler):
    """A root linked to a sampled span is sampled; any other root, as `root` decides."""

    def __init__(self, root: Sampler) -> None:
        self.root = root

    def should_sample(  # noqa: PLR0917 - the SDK passes them by position
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        if links and any(link.context.trace_flags.sampled for link in links):
            return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes, trace_state)
        return self.root.should_sample(
            parent_context, trace_id, name, kind, attributes, links, trace_state
        )

    def get_description(self) -> str:
        return f"SampledLinksOr{{{self.root.get_description()}}}"


class _ParentBased(ParentBased):
    """`ParentBased` over `_SampledLinks`, kept where `SamplingAhead` can read it (the SDK's
    keeps its root to itself)."""

    def __init__(self, root: _SampledLinks) -> None:
        super().__init__(root)
        self.root = root


def _new_trace_bound(sampler: Sampler) -> int | None:
    """A new trace without links is sampled when the low 64 bits of its id are below this, by
    `sampler`; None: `sampler` decides by more than the id."""
    if isinstance(sampler, _ParentBased | _SampledLinks):
        # No parent, no links: the root decides.
        return _new_trace_bound(sampler.root)
    if isinstance(sampler, TraceIdRatioBased):
        return sampler.bound
    if sampler is ALWAYS_ON:
        return _TRACE_ID_LIMIT + 1
    if sampler is ALWAYS_OFF:
        return 0
    return None


_TRACE_ID_LIMIT: Final = TraceIdRatioBased.TRACE_ID_LIMIT


class DrawnTraceIds(RandomIdGenerator):
    """The SDK's random ids, except that a trace id drawn ahead (`SamplingAhead`) is the next
    one the provider hands out on the thread that drew it."""

    def __init__(self) -> None:
        self._drawn = threading.local()

    def generate_trace_id(self) -> int:
        drawn: int | None = getattr(self._drawn, "trace_id", None)
        if drawn is None:
            return super().generate_trace_id()
        self._drawn.trace_id = None
        return drawn

    def hand_out_next(self, trace_id: int | None) -> None:
        """`trace_id` for the next span of a new trace on this thread; None: none any more."""
        self._drawn.trace_id = trace_id

    def draw_trace_id(self) -> int:
        return super().generate_trace_id()


class SamplingAhead:
    """A delivery's span sampled before the SDK is asked for it, so that an unsampled call
    (99 in 100 by default) costs a span made here instead of the SDK's span, its attributes
    and its sampler's second pass.

    The decision is the provider's sampler's, for the same parent and trace id the SDK would
    pass it: a new trace's id is drawn here and handed to the SDK (`DrawnTraceIds`) as it
    makes the recorded span. A new trace that a sampler of this module's decides by its id
    alone is decided here by the sampler's own test, and a `LeftOutSpan` holds it when left
    out: no sampling result, no context object. Any other unsampled span has the context the
    SDK makes: the parent's trace id and trace state, a new span id, the flags without
    "sampled".
    """

    def __init__(self, sampler: Sampler, ids: DrawnTraceIds) -> None:
        self._sampler = sampler
        self._ids = ids
        self._new_trace_bound = _new_trace_bound(sampler)
        self._new_trace_flags = (
            TraceFlags.RANDOM_TRACE_ID if ids.is_trace_id_random() else TraceFlags.DEFAULT
        )

    def start_span(
        self,
        tracer: trace.Tracer,
        parent: Context,
        name: str,
        kind: SpanKind,
        attributes: Callable[[], Attributes],
    ) -> Span:
        """The delivery's span, started: made here when the sampler leaves it out, else the
        SDK's, with `attributes()`, in the trace whose id the decision was made on."""
        parent_span = trace.get_current_span(parent).get_span_context()
        new_trace = not parent_span.is_valid
        if new_trace:
            trace_id, flags = self._ids.draw_trace_id(), self._new_trace_flags
        else:
            trace_id = parent_span.trace_id
            random_id = parent_span.trace_flags.random_trace_id
            flags = TraceFlags.RANDOM_TRACE_ID if random_id else TraceFlags.DEFAULT
        bound = self._new_trace_bound if new_trace else None
        if bound is not None:
            # The sampler's own test, without its result object: a new trace has no trace state.
            if trace_id & _TRACE_ID_LIMIT >= bound:
                return LeftOutSpan(trace_id, self._ids.generate_span_id(), flags)
        else:
            result = self._sampler.should_sample(parent, trace_id, name, kind)
            if result.decision is Decision.DROP:
                return NonRecordingSpan(
                    SpanContext(
                        trace_id,
                        self._ids.generate_span_id(),
                        is_remote=False,
                        trace_flags=TraceFlags(flags),
                        trace_state=result.trace_state,
                    )
                )
        if not new_trace:
            return tracer.start_span(name, context=parent, kind=kind, attributes=attributes())
        # Made now, not when a `with` is entered later: no other span can take the id first.
        self._ids.hand_out_next(trace_id)
        try:
            return tracer.start_span(name, context=parent, kind=kind, attributes=attributes())
        finally:
            self._ids.hand_out_next(None)  # taken, or left by an SDK that made no span
