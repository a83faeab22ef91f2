"""infra.observability.tracing_sampler: which calls are traced, as `OTEL_TRACES_SAMPLER` says,
and by default one new trace in a hundred and every call the bot sampled."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from opentelemetry import baggage, propagate, trace
from opentelemetry.context import Context, attach, detach
from opentelemetry.propagators.textmap import (
    Getter,
    Setter,
    TextMapPropagator,
    default_getter,
    default_setter,
)
from opentelemetry.sdk.trace import Tracer, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    Decision,
    ParentBased,
    Sampler,
    TraceIdRatioBased,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from infra.observability import tracing, tracing_setup
from infra.observability.tracing_sampler import (
    DEFAULT_SAMPLER,
    DEFAULT_SAMPLER_RATIO,
    DrawnTraceIds,
    sampler_from,
)
from tests.support.tracing import spans_in_memory, traced_by

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
SAMPLED = f"00-{TRACE_ID}-b7ad6b7169203331-01"
UNSAMPLED = f"00-{TRACE_ID}-b7ad6b7169203331-00"
_W3C = TraceContextTextMapPropagator()
# Trace ids whose low 64 bits a ratio sampler compares with ratio * 2^64.
LOW = 1
HIGH = (1 << 64) - 1


def _root_decision(sampler: Sampler, trace_id: int) -> Decision:
    return sampler.should_sample(None, trace_id, "process ltm.tool_calls").decision


def test_unset_it_is_parent_based_at_the_default_ratio() -> None:
    sampler = sampler_from({})
    assert DEFAULT_SAMPLER == "parentbased_traceidratio"
    assert DEFAULT_SAMPLER_RATIO == 0.01
    assert sampler.get_description().startswith(
        "ParentBased{root:SampledLinksOr{TraceIdRatioBased{0.01}}"
    )
    assert _root_decision(sampler, LOW) is Decision.RECORD_AND_SAMPLE
    assert _root_decision(sampler, HIGH) is Decision.DROP
    # Trace ids in the first hundredth of the range are sampled, beyond it not.
    assert _root_decision(sampler, (1 << 64) // 101) is Decision.RECORD_AND_SAMPLE
    assert _root_decision(sampler, (1 << 64) // 99) is Decision.DROP


def test_the_ratio_alone_changes_the_default_s_ratio() -> None:
    sampler = sampler_from({"OTEL_TRACES_SAMPLER_ARG": "0.5"})
    assert "TraceIdRatioBased{0.5}" in sampler.get_description()
    assert sampler.get_description().startswith("ParentBased{")


@pytest.mark.parametrize(
    ("env", "description"),
    [
        (
            {"OTEL_TRACES_SAMPLER": "parentbased_always_on"},
            "ParentBased{root:SampledLinksOr{AlwaysOn",
        ),
        (
            {"OTEL_TRACES_SAMPLER": "parentbased_always_off"},
            "ParentBased{root:SampledLinksOr{AlwaysOff",
        ),
        (
            {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25"},
            "ParentBased{root:SampledLinksOr{TraceIdRatioBased{0.25}}",
        ),
        ({"OTEL_TRACES_SAMPLER": "always_on"}, "AlwaysOnSampler"),
        ({"OTEL_TRACES_SAMPLER": "always_off"}, "AlwaysOffSampler"),
        (
            {"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "1"},
            "TraceIdRatioBased{1.0}",
        ),
        (
            {"OTEL_TRACES_SAMPLER": " ParentBased_Always_On "},
            "ParentBased{root:SampledLinksOr{AlwaysOn",
        ),
    ],
)
def test_the_sdk_s_variables_are_honoured(env: dict[str, str], description: str) -> None:
    assert sampler_from(env).get_description().startswith(description)


@pytest.mark.parametrize(
    "env",
    [
        {"OTEL_TRACES_SAMPLER": "jaeger_remote"},  # not one this module builds
        {"OTEL_TRACES_SAMPLER_ARG": "ten percent"},
        {"OTEL_TRACES_SAMPLER_ARG": "1.5"},
        {"OTEL_TRACES_SAMPLER_ARG": ""},
    ],
)
def test_what_it_cannot_read_leaves_the_default(env: dict[str, str]) -> None:
    assert sampler_from(env).get_description() == sampler_from({}).get_description()


@pytest.fixture
def exported(request: pytest.FixtureRequest) -> Iterator[InMemorySpanExporter]:
    """Tracing on with the sampler of the test's parameter (a `sampler_from` environment)."""
    with spans_in_memory(sampler_from(request.param)) as exporter:
        yield exporter


def _sampled(traceparent: str | None) -> bool:
    """Whether the delivery's CONSUMER span records, for a message carrying `traceparent`."""
    headers = {} if traceparent is None else {"traceparent": traceparent}
    with tracing.processing(
        headers=headers,
        exchange="ltm.tool_calls",
        routing_key="update_long_term_memory",
        message_id="event-1",
        conversation_id="call-1",
    ) as span:
        assert span is not None
        return span.is_recording()


# At a ratio of 0 the worker samples no trace it starts: only its parent's flag can sample.
@pytest.mark.parametrize("exported", [{"OTEL_TRACES_SAMPLER_ARG": "0"}], indirect=True)
def test_a_call_the_bot_sampled_is_sampled(exported: InMemorySpanExporter) -> None:
    assert _sampled(SAMPLED)
    [process] = exported.get_finished_spans()
    assert f"{process.context.trace_id:032x}" == TRACE_ID
    assert not _sampled(None)


@pytest.mark.parametrize(
    "exported", [{"OTEL_TRACES_SAMPLER": "parentbased_always_on"}], indirect=True
)
def test_a_call_the_bot_left_out_is_not_sampled(exported: InMemorySpanExporter) -> None:
    assert not _sampled(UNSAMPLED)
    assert _sampled(None)
    assert len(exported.get_finished_spans()) == 1


@pytest.mark.parametrize("exported", [{"OTEL_TRACES_SAMPLER_ARG": "0"}], indirect=True)
def test_a_batch_s_transaction_is_recorded_on_its_sampled_calls_alone(
    exported: InMemorySpanExporter,
) -> None:
    calls: list[trace.Span | None] = []
    with contextlib.ExitStack() as open_calls:  # a batch's calls are open until it commits
        for traceparent in (SAMPLED, UNSAMPLED, None):
            calls.append(
                open_calls.enter_context(
                    tracing.processing(
                        headers={} if traceparent is None else {"traceparent": traceparent},
                        exchange="ltm.tool_calls",
                        routing_key="update_long_term_memory",
                        message_id=None,
                        conversation_id=None,
                    )
                )
            )
        with tracing.transaction(calls, database="ltm"):
            pass
        # No sampled call: nothing recorded, nothing made.
        assert tracing.transaction(calls[1:], database="ltm") is tracing.transaction(
            [], database="ltm"
        )
    [process] = exported.get_finished_spans()
    assert f"{process.context.trace_id:032x}" == TRACE_ID
    assert [event.name for event in process.events] == [
        "ltm.transaction.begin",
        "ltm.transaction.commit",
    ]
    # The count is the batch's.
    assert (process.events[0].attributes or {})["messaging.batch.message_count"] == 3


@pytest.mark.parametrize("exported", [{"OTEL_TRACES_SAMPLER_ARG": "0"}], indirect=True)
def test_a_replay_of_a_sampled_call_is_sampled(exported: InMemorySpanExporter) -> None:
    def replayed(original: str) -> bool:
        with tracing.sending(
            exchange="ltm.tool_calls",
            routing_key="update_long_term_memory",
            message_id=None,
            conversation_id=None,
            headers={},
            parent=None,
            linked_headers={"traceparent": original},
        ) as span:
            assert span is not None
            return span.is_recording()

    # A new trace, which the ratio alone would leave out; linked to a sampled one, it is not.
    assert replayed(SAMPLED)
    assert not replayed(UNSAMPLED)
    [replay] = exported.get_finished_spans()
    assert replay.parent is None
    assert [f"{link.context.trace_id:032x}" for link in replay.links] == [TRACE_ID]


# -- sampling ahead -------------------------------------------------------------------------


def _delivered(headers: Mapping[str, object]) -> tuple[trace.Span, bool, dict[str, object]]:
    """The span of a delivery carrying `headers`, whether it recorded, and the headers of an
    event it publishes."""
    event: dict[str, object] = {}
    with tracing.processing(
        headers=headers,
        exchange="ltm.tool_calls",
        routing_key="update_long_term_memory",
        message_id=None,
        conversation_id=None,
    ) as span:
        assert span is not None
        tracing.carrying_current([event])
        return span, span.is_recording(), event


def _how_sampled(headers: dict[str, object]) -> tuple[object, ...]:
    """What a delivery's span is, but its random span id: as the gateway and logs see it."""
    span, recording, event = _delivered(headers)
    context = span.get_span_context()
    traceparent = event.get("traceparent")
    return (
        recording,
        context.trace_id if headers else None,  # a new trace's id is random
        int(context.trace_flags),
        context.trace_state.to_header(),
        str(traceparent).split("-")[3] if traceparent is not None else None,
        event.get("tracestate"),
    )


PARENTS: list[dict[str, object]] = [
    {},
    {"traceparent": SAMPLED},
    {"traceparent": UNSAMPLED},
    {"traceparent": UNSAMPLED, "tracestate": "vendor=a"},
    {"traceparent": SAMPLED, "tracestate": "vendor=b"},
]


@pytest.mark.parametrize("sampler", ["parentbased_always_off", "parentbased_always_on"])
def test_a_delivery_sampled_ahead_is_what_the_sdk_alone_makes(sampler: str) -> None:
    def seen(ahead: bool) -> list[tuple[object, ...]]:
        with spans_in_memory(sampler_from({"OTEL_TRACES_SAMPLER": sampler}), ahead=ahead):
            assert (tracing_setup.STATE.ahead is not None) is ahead
            return [_how_sampled(headers) for headers in PARENTS]

    ahead, alone = seen(True), seen(False)
    assert ahead == alone
    # Each case is what it says: the bot's flag and trace state followed, a new trace as the
    # root sampler says.
    assert [recording for recording, *_ in ahead] == [
        sampler.endswith("on"),
        True,
        False,
        False,
        True,
    ]
    # An unsampled call's events carry no context; a sampled one's, its trace state too.
    sampled_flags = [None if flags is None else int(str(flags), 16) & 1 for *_, flags, _ in ahead]
    assert sampled_flags == [1 if on else None for on, *_ in ahead]
    assert ahead[3][3] == "vendor=a" and ahead[3][5] is None
    assert ahead[4][5] == "vendor=b"


class _ByName(Sampler):
    """A root sampler that decides by more than the trace id: by the span's name (an SDK
    sampler's `should_sample`, with every parameter)."""

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: trace.SpanKind | None = None,
        attributes: Any = None,
        links: Any = None,
        trace_state: Any = None,
    ) -> Any:
        # The deliveries here are tool calls: left out.
        decides = ALWAYS_ON if name.endswith("events") else ALWAYS_OFF
        return decides.should_sample(parent_context, trace_id, name)

    def get_description(self) -> str:
        return "ByName"


@pytest.mark.parametrize(
    "sampler",
    [
        sampler_from({"OTEL_TRACES_SAMPLER": "always_on"}),
        sampler_from({"OTEL_TRACES_SAMPLER": "always_off"}),
        sampler_from({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "1"}),
        sampler_from({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0"}),
        _ByName(),
        ParentBased(_ByName()),
    ],
    ids=["always_on", "always_off", "ratio_1", "ratio_0", "by_name", "parent_based_by_name"],
)
def test_any_sampler_s_decision_ahead_is_the_sdk_s(sampler: Sampler) -> None:
    def seen(ahead: bool) -> list[tuple[object, ...]]:
        with spans_in_memory(sampler, ahead=ahead):
            return [_how_sampled(headers) for headers in PARENTS]

    assert seen(True) == seen(False)


def test_a_left_out_call_makes_no_span_context_unless_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[trace.SpanContext] = []

    def counted(*args: Any, **kwargs: Any) -> trace.SpanContext:
        made.append(trace.SpanContext(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(tracing, "SpanContext", counted)
    event: dict[str, object] = {}
    dead_letter: dict[str, object] = {}
    with (
        spans_in_memory(sampler_from({"OTEL_TRACES_SAMPLER_ARG": "0"})) as exported,
        tracing.processing(
            headers={},
            exchange="ltm.tool_calls",
            routing_key="update_long_term_memory",
            message_id=None,
            conversation_id=None,
        ) as span,
    ):
        # What every call does: its events, its outbox rows' traceparent, a log line, the
        # transaction, the settlement.
        tracing.carrying_current([event])
        stored = tracing.traceparent_of(tracing.current_span())
        assert tracing.add_trace_ids(None, "info", {}) == {}
        with tracing.transaction([span], database="ltm") as transaction:
            assert transaction is None
        tracing.settled("ack", delivery_tag=1)
        assert made == []
        # A dead-letter copy's publish asks for its context, and is left out with the call.
        with tracing.sending(
            exchange="ltm.dead_letter",
            routing_key="dead",
            message_id=None,
            conversation_id=None,
            headers=dead_letter,
        ) as send:
            assert send is not None and not send.is_recording()
    assert isinstance(span, tracing.LeftOutSpan) and len(made) == 1
    context = span.get_span_context()
    assert event == {} and exported.get_finished_spans() == ()
    # What is stored and sent is W3C's form of the call's context, as the propagator writes it.
    assert stored == _w3c_form(context)
    assert str(dead_letter["traceparent"]).split("-")[1] == f"{context.trace_id:032x}"
    assert not int(str(dead_letter["traceparent"]).split("-")[3], 16) & 1


def _w3c_form(context: trace.SpanContext) -> str:
    carrier: dict[str, str] = {}
    _W3C.inject(carrier, context=trace.set_span_in_context(trace.NonRecordingSpan(context)))
    return carrier["traceparent"]


def test_a_new_trace_s_decision_is_the_ratio_s_for_the_id_it_keeps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[str] = []
    start_span = Tracer.start_span

    def counted(self: Tracer, name: str, *args: Any, **kwargs: Any) -> trace.Span:
        made.append(name)
        return start_span(self, name, *args, **kwargs)

    monkeypatch.setattr(Tracer, "start_span", counted)
    bound = TraceIdRatioBased.get_bound_for_rate(0.5)
    with spans_in_memory(sampler_from({"OTEL_TRACES_SAMPLER_ARG": "0.5"})) as exported:
        delivered = [_delivered({}) for _ in range(200)]
    spans = [span for span, _, _ in delivered]
    recorded = [recording for _, recording, _ in delivered]
    # The SDK made the span of each sampled call, with the trace id drawn for its decision,
    # and no span of any other.
    assert recorded == [
        span.get_span_context().trace_id & TraceIdRatioBased.TRACE_ID_LIMIT < bound
        for span in spans
    ]
    assert 0 < sum(recorded) < len(spans)
    assert len(made) == sum(recorded) == len(exported.get_finished_spans())
    assert len({span.get_span_context().trace_id for span in spans}) == len(spans)


def test_a_trace_id_drawn_ahead_is_handed_out_once_on_its_own_thread() -> None:
    ids = DrawnTraceIds()
    drawn = ids.draw_trace_id()
    ids.hand_out_next(drawn)
    elsewhere: list[int] = []
    thread = threading.Thread(target=lambda: elsewhere.append(ids.generate_trace_id()))
    thread.start()
    thread.join(timeout=10)
    assert elsewhere and elsewhere[0] != drawn
    assert ids.generate_trace_id() == drawn
    assert ids.generate_trace_id() != drawn


def test_a_provider_of_the_host_s_own_is_sampled_by_the_sdk_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with traced_by(TracerProvider()):
        assert tracing_setup.STATE.ahead is None
    # The SDK's own counts of the spans it starts would miss those made ahead.
    monkeypatch.setenv("OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED", "true")
    with traced_by(TracerProvider(id_generator=DrawnTraceIds())):
        assert tracing_setup.STATE.ahead is None
    assert tracing_setup.STATE.ahead is None and not tracing.enabled()


@pytest.mark.parametrize(
    "exported", [{"OTEL_TRACES_SAMPLER": "parentbased_always_on"}], indirect=True
)
@pytest.mark.parametrize(
    ("current", "with_baggage"),
    [
        ({"traceparent": SAMPLED}, False),
        ({"traceparent": SAMPLED, "tracestate": "vendor=a"}, False),
        ({"traceparent": SAMPLED}, True),
        ({}, False),
    ],
)
def test_the_headers_written_directly_are_what_the_propagators_write(
    exported: InMemorySpanExporter, current: dict[str, object], with_baggage: bool
) -> None:
    written: dict[str, object] = {"tracestate": "old=1", "schema_version": 1}
    expected: dict[str, object] = {"schema_version": 1}
    with tracing.processing(
        headers=current, exchange="x", routing_key="k", message_id=None, conversation_id=None
    ):
        token = attach(baggage.set_baggage("tenant", "1")) if with_baggage else None
        tracing.carrying_current([written])
        propagate.inject(expected)
        if token is not None:
            detach(token)
    assert written == expected
    assert "traceparent" in written
    assert ("baggage" in written) is with_baggage


class _RenamedTraceContext(TextMapPropagator):
    """W3C's `traceparent` under another name: a propagator whose headers this module cannot
    write or skip itself."""

    def extract(
        self,
        carrier: Any,
        context: Context | None = None,
        getter: Getter[Any] = default_getter,
    ) -> Context:
        values = getter.get(carrier, "x-trace")
        if not values:
            return context if context is not None else Context()
        return _W3C.extract({"traceparent": values[0]}, context=context)

    def inject(
        self,
        carrier: Any,
        context: Context | None = None,
        setter: Setter[Any] = default_setter,
    ) -> None:
        inner: dict[str, str] = {}
        _W3C.inject(inner, context=context)
        if "traceparent" in inner:
            setter.set(carrier, "x-trace", inner["traceparent"])

    @property
    def fields(self) -> set[str]:
        return {"x-trace"}


@pytest.mark.parametrize("exported", [{"OTEL_TRACES_SAMPLER_ARG": "0"}], indirect=True)
def test_another_propagator_s_headers_are_its_own_to_read_and_write(
    exported: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(propagate, "_HTTP_TEXT_FORMAT", _RenamedTraceContext())
    for headers in ({"x-trace": SAMPLED}, {"x-trace": SAMPLED, "traceparent": UNSAMPLED}):
        span, recording, event = _delivered(headers)
        # The bot's context came from its header alone, with no W3C one, or one beside it.
        assert recording
        assert f"{span.get_span_context().trace_id:032x}" == TRACE_ID
        assert set(event) == {"x-trace"}
        assert str(event["x-trace"]).endswith("-01")


def test_a_drawn_trace_id_is_the_delivery_s_even_if_another_span_starts_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    handed_out: set[int] = set()
    hand_out_next = DrawnTraceIds.hand_out_next

    def noted(self: DrawnTraceIds, trace_id: int | None) -> None:
        if trace_id is not None:
            handed_out.add(trace_id)
        hand_out_next(self, trace_id)

    monkeypatch.setattr(DrawnTraceIds, "hand_out_next", noted)
    deliveries: list[int] = []
    others: list[int] = []
    with spans_in_memory(sampler_from({"OTEL_TRACES_SAMPLER_ARG": "0.5"})):
        for _ in range(100):
            delivery = tracing.processing(
                headers={},
                exchange="ltm.tool_calls",
                routing_key="update_long_term_memory",
                message_id=None,
                conversation_id=None,
            )
            # A span of a trace of its own, started between the call and the `with`.
            with tracing.posting("POST", "/x", channel_id="1") as other:
                assert other is not None
                others.append(other.get_span_context().trace_id)
            with delivery as span:
                assert span is not None
                if span.is_recording():
                    deliveries.append(span.get_span_context().trace_id)
    # Each recorded delivery kept the id its decision was made on, and no other span took one.
    assert deliveries and set(deliveries) <= handed_out
    assert handed_out.isdisjoint(others)
