"""infra.observability.tracing_sampler: which calls are traced, as `OTEL_TRACES_SAMPLER` says,
and by default one new trace in ten and every call the bot sampled."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Decision, Sampler

from infra.observability import tracing
from infra.observability.tracing_sampler import (
    DEFAULT_SAMPLER,
    DEFAULT_SAMPLER_RATIO,
    sampler_from,
)
from tests.support.tracing import spans_in_memory

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
SAMPLED = f"00-{TRACE_ID}-b7ad6b7169203331-01"
UNSAMPLED = f"00-{TRACE_ID}-b7ad6b7169203331-00"
# Trace ids whose low 64 bits a ratio sampler compares with ratio * 2^64.
LOW = 1
HIGH = (1 << 64) - 1


def _root_decision(sampler: Sampler, trace_id: int) -> Decision:
    return sampler.should_sample(None, trace_id, "process ltm.tool_calls").decision


def test_unset_it_is_parent_based_at_the_default_ratio() -> None:
    sampler = sampler_from({})
    assert DEFAULT_SAMPLER == "parentbased_traceidratio"
    assert DEFAULT_SAMPLER_RATIO == 0.1
    assert sampler.get_description().startswith(
        "ParentBased{root:SampledLinksOr{TraceIdRatioBased{0.1}}"
    )
    assert _root_decision(sampler, LOW) is Decision.RECORD_AND_SAMPLE
    assert _root_decision(sampler, HIGH) is Decision.DROP
    # Trace ids in the first tenth of the range are sampled, in the second not.
    assert _root_decision(sampler, (1 << 64) // 11) is Decision.RECORD_AND_SAMPLE
    assert _root_decision(sampler, (1 << 64) // 9) is Decision.DROP


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
def test_a_batch_holding_a_sampled_call_has_its_transaction_sampled(
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
        with tracing.transaction(calls, database="ltm") as transaction:
            assert transaction is not None and transaction.is_recording()
        # No sampled call: no transaction span.
        with tracing.transaction(calls[1:], database="ltm") as none:
            assert none is None
    names = sorted(span.name for span in exported.get_finished_spans())
    assert names == ["process ltm.tool_calls", "transaction ltm"]
    [batch] = [span for span in exported.get_finished_spans() if span.name == "transaction ltm"]
    assert batch.parent is None
    # Linked to the sampled call only; the count is the batch's.
    assert [f"{link.context.trace_id:032x}" for link in batch.links] == [TRACE_ID]
    assert (batch.attributes or {})["messaging.batch.message_count"] == 3
