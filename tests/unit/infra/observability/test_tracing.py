"""infra.observability.tracing: off unless asked for, and then the spans, links and headers a trace
needs."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import propagate, trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import (
    db_attributes,
    http_attributes,
    messaging_attributes,
    url_attributes,
)
from opentelemetry.semconv.attributes import error_attributes

from infra.observability import tracing
from infra.observability.logs import configure_logging, get_logger
from tests.support.tracing import spans_in_memory

ROOT = Path(__file__).resolve().parents[4]
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def exported() -> Iterator[InMemorySpanExporter]:
    """Tracing on, into memory, for one test."""
    with spans_in_memory() as exporter:
        yield exporter


def _by_name(exporter: InMemorySpanExporter, name: str) -> ReadableSpan:
    [span] = [span for span in exporter.get_finished_spans() if span.name == name]
    return span


def _send(headers: dict[str, object], **options: object) -> trace.Span | None:
    with tracing.sending(
        exchange="ltm.tool_calls",
        routing_key="update_long_term_memory",
        message_id="event-1",
        conversation_id="call-1",
        headers=headers,
        **options,  # type: ignore[arg-type]
    ) as span:
        return span


def _delivery(
    headers: dict[str, object], **options: object
) -> contextlib.AbstractContextManager[trace.Span | None]:
    """The span of a tool call's delivery carrying `headers` (`options`: other arguments)."""
    arguments: dict[str, Any] = {
        "exchange": "ltm.tool_calls",
        "routing_key": "update_long_term_memory",
        "message_id": "event-1",
        "conversation_id": "call-1",
        **options,
    }
    return tracing.processing(headers=headers, **arguments)


# -- off ------------------------------------------------------------------------------------


def test_off_by_default_every_helper_is_a_shared_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("tracing off must not touch the context")

    # No context extraction, no injection, no span looked up.
    monkeypatch.setattr(propagate, "extract", refuse)
    monkeypatch.setattr(propagate, "inject", refuse)
    monkeypatch.setattr(trace, "get_current_span", refuse)
    assert not tracing.enabled()
    headers: dict[str, object] = {"schema_version": 1, "traceparent": TRACEPARENT}
    managers = [
        tracing.sending(
            exchange="x", routing_key="k", message_id="m", conversation_id=None, headers=headers
        ),
        tracing.processing(
            headers=headers, exchange="x", routing_key="k", message_id="m", conversation_id=None
        ),
        tracing.transaction([None, None], database="ltm"),
        tracing.posting("POST", "/channels/{channel.id}/messages", channel_id="1"),
    ]
    assert len({id(manager) for manager in managers}) == 1  # one shared object, nothing made
    for manager in managers:
        with manager as span:
            assert span is None
    tracing.settled("ack", delivery_tag=1)
    unread = iter([headers])
    tracing.carrying_current(unread)
    assert next(unread) is headers  # not even iterated while off
    assert headers == {"schema_version": 1, "traceparent": TRACEPARENT}  # untouched
    assert tracing.current_span() is None
    assert tracing.add_trace_ids(None, "info", {"event": "x"}) == {"event": "x"}


def _configured(env: dict[str, str]) -> dict[str, object]:
    """`configure_tracing` in a fresh interpreter (it installs a process-wide provider)."""
    script = (
        "import json\n"
        "from opentelemetry import trace\n"
        "from infra.observability.tracing import configure_tracing\n"
        "from infra.observability.tracing_setup import STATE\n"
        "on = configure_tracing('ltm-test')\n"
        "provider = trace.get_tracer_provider()\n"
        "resource = getattr(provider, 'resource', None)\n"
        "name = resource.attributes.get('service.name') if resource else None\n"
        "sampler = getattr(provider, 'sampler', None)\n"
        "described = sampler.get_description() if sampler else None\n"
        "ahead = STATE.ahead is not None\n"
        "print(json.dumps({'on': on, 'service': name, 'sampler': described, 'ahead': ahead}))\n"
    )
    clean = {name: value for name, value in os.environ.items() if not name.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", script],
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        timeout=60,
    )
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


@pytest.mark.parametrize(
    ("env", "on"),
    [
        ({}, False),
        ({"OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, False),  # not one this build can make
    ],
)
def test_the_environment_turns_tracing_on(env: dict[str, str], on: bool) -> None:
    assert _configured(env)["on"] is on


def test_the_service_is_named_by_default_and_by_otel_service_name() -> None:
    asked = {"OTEL_TRACES_EXPORTER": "console"}
    assert _configured(asked)["service"] == "ltm-test"
    assert _configured({**asked, "OTEL_SERVICE_NAME": "worker-eu-1"})["service"] == "worker-eu-1"


def test_the_worker_s_sampler_is_the_default_unless_the_sdk_s_variables_say() -> None:
    asked = {"OTEL_TRACES_EXPORTER": "console"}
    default = str(_configured(asked)["sampler"])
    assert default.startswith("ParentBased{root:SampledLinksOr{TraceIdRatioBased{0.01}}")
    everything = _configured({**asked, "OTEL_TRACES_SAMPLER": "parentbased_always_on"})
    assert str(everything["sampler"]).startswith("ParentBased{root:SampledLinksOr{AlwaysOn")


def test_the_worker_samples_its_deliveries_ahead_unless_the_sdk_counts_its_spans() -> None:
    asked = {"OTEL_TRACES_EXPORTER": "console"}
    assert _configured(asked)["ahead"] is True
    counted = _configured({**asked, "OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED": "true"})
    assert counted["on"] is True and counted["ahead"] is False


# -- on -------------------------------------------------------------------------------------


def test_a_publish_puts_its_context_in_the_headers_and_the_consumer_continues_it(
    exported: InMemorySpanExporter,
) -> None:
    headers: dict[str, object] = {"schema_version": 1}
    sent = _send(headers)
    assert sent is not None
    assert str(headers["traceparent"]).split("-")[1] == f"{sent.get_span_context().trace_id:032x}"

    with tracing.processing(
        headers=headers,
        exchange="ltm.tool_calls",
        routing_key="update_long_term_memory",
        message_id="event-1",
        conversation_id="call-1",
        queue="ltm.tool_calls.worker",
    ):
        tracing.settled("ack", delivery_tag=7)

    send = _by_name(exported, "send ltm.tool_calls")
    process = _by_name(exported, "process ltm.tool_calls")
    assert send.kind is trace.SpanKind.PRODUCER and process.kind is trace.SpanKind.CONSUMER
    assert process.context.trace_id == send.context.trace_id
    assert process.parent is not None and process.parent.span_id == send.context.span_id
    assert [span.name for span in exported.get_finished_spans()] == [
        "send ltm.tool_calls",
        "process ltm.tool_calls",
    ]  # the settlement is no span of its own
    assert dict(send.attributes or {}) == {
        "messaging.system": "rabbitmq",
        "messaging.operation.name": "send",
        "messaging.operation.type": "send",
        "messaging.destination.name": "ltm.tool_calls",
        "messaging.rabbitmq.destination.routing_key": "update_long_term_memory",
        "messaging.message.id": "event-1",
        "messaging.message.conversation_id": "call-1",
    }
    assert (process.attributes or {})["messaging.destination.subscription.name"] == (
        "ltm.tool_calls.worker"
    )
    assert (process.attributes or {})["ltm.delivery.settlement"] == "ack"
    assert (process.attributes or {})["messaging.rabbitmq.message.delivery_tag"] == 7


def test_a_call_s_events_carry_its_context_and_make_no_span(
    exported: InMemorySpanExporter,
) -> None:
    tracer = trace.get_tracer("test", tracer_provider=_provider_of(exported))
    events: list[dict[str, object]] = [{"tracestate": "vendor=old"}, {}, {"schema_version": 1}]
    with tracer.start_as_current_span("call") as call:
        tracing.carrying_current(headers for headers in events)  # as the worker passes them
    assert [span.name for span in exported.get_finished_spans()] == ["call"]
    parts = [str(headers.get("traceparent")).split("-") for headers in events]
    context = call.get_span_context()
    expected = ["00", f"{context.trace_id:032x}", f"{context.span_id:016x}"]
    assert [part[:3] for part in parts] == [expected] * 3
    assert all(int(part[3], 16) & 1 for part in parts)  # sampled
    assert "tracestate" not in events[0]
    assert events[2]["schema_version"] == 1


def test_an_unsampled_call_makes_no_child_span_and_its_events_carry_no_context(
    exported: InMemorySpanExporter,
) -> None:
    unsampled = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
    events: list[dict[str, object]] = [{}, {"schema_version": 1}]
    with _delivery({"traceparent": unsampled}):
        call = tracing.current_span()
        assert call is not None and not call.is_recording()
        with tracing.transaction([call], database="ltm") as transaction:
            assert transaction is None
        tracing.carrying_current(events)
        tracing.settled("ack", delivery_tag=1)
        stored = tracing.traceparent_of(call)
    assert exported.get_finished_spans() == ()
    # The gateway leaves an event without a context out (below); a late publish of a stored
    # row follows the bot's "not sampled".
    assert events == [{}, {"schema_version": 1}]
    assert stored is not None and stored.endswith("-00")
    assert stored.split("-")[1] == unsampled.split("-")[1]


def test_a_consumer_that_starts_no_trace_leaves_a_delivery_without_a_context_out(
    exported: InMemorySpanExporter,
) -> None:
    # The SDK's default sampler (parent-based, every new trace sampled) would trace it.
    def deliver(headers: dict[str, object]) -> tuple[bool, bool]:
        """Whether the delivery's span, and a request to Discord made within it, record."""
        with _delivery(
            headers, exchange="ltm.events", routing_key="embed.shard.0", starts_trace=False
        ) as span:
            assert span is not None and span.get_span_context().is_valid
            with tracing.posting("POST", "/x", channel_id="1") as post:
                assert post is not None
                return span.is_recording(), post.is_recording()

    # Nor is what it does within traced: the request follows its flag.
    assert deliver({"schema_version": 1}) == (False, False)
    assert exported.get_finished_spans() == ()
    # An event with a sampled context is continued, as by any consumer.
    assert deliver({"schema_version": 1, "traceparent": TRACEPARENT}) == (True, True)
    process = _by_name(exported, "process ltm.events")
    assert f"{process.context.trace_id:032x}" == TRACEPARENT.split("-")[1]


def test_a_delivery_without_a_context_starts_a_trace_whatever_is_current(
    exported: InMemorySpanExporter,
) -> None:
    with tracing.posting("POST", "/x", channel_id="1") as outer:
        assert outer is not None
        with tracing.processing(
            headers={"schema_version": 1},
            exchange="ltm.events",
            routing_key="result.shard.0",
            message_id=None,
            conversation_id=None,
        ):
            pass
    process = _by_name(exported, "process ltm.events")
    assert process.parent is None
    assert process.context.trace_id != outer.get_span_context().trace_id


def test_a_stored_traceparent_is_the_parent_of_a_late_publish(
    exported: InMemorySpanExporter,
) -> None:
    headers: dict[str, object] = {}
    _send(headers, parent=TRACEPARENT)
    send = _by_name(exported, "send ltm.tool_calls")
    assert f"{send.context.trace_id:032x}" == TRACEPARENT.split("-")[1]
    assert send.parent is not None and f"{send.parent.span_id:016x}" == TRACEPARENT.split("-")[2]


def test_a_copy_starts_a_trace_linked_to_the_original_and_drops_its_tracestate(
    exported: InMemorySpanExporter,
) -> None:
    original = {"traceparent": TRACEPARENT, "tracestate": "vendor=old", "x-ltm-error": "bad"}
    copy: dict[str, object] = dict(original)
    _send(copy, parent=None, linked_headers=original)
    send = _by_name(exported, "send ltm.tool_calls")
    assert send.parent is None
    [link] = send.links
    assert f"{link.context.trace_id:032x}" == TRACEPARENT.split("-")[1]
    assert copy["traceparent"] != TRACEPARENT
    assert "tracestate" not in copy  # the old trace's vendor state does not travel on
    assert copy["x-ltm-error"] == "bad"


def _events(span: ReadableSpan) -> list[tuple[str, dict[str, object]]]:
    return [(event.name, dict(event.attributes or {})) for event in span.events]


def test_a_call_s_transaction_is_two_events_on_its_span(exported: InMemorySpanExporter) -> None:
    tracer = trace.get_tracer("test", tracer_provider=_provider_of(exported))
    with (
        tracer.start_as_current_span("call") as call,
        tracing.transaction([call], database="ltm") as transaction,
    ):
        assert transaction is None
    [recorded] = exported.get_finished_spans()  # no span of its own
    assert _events(recorded) == [
        (
            "ltm.transaction.begin",
            {
                "db.system.name": "postgresql",
                "db.namespace": "ltm",
                "messaging.batch.message_count": 1,
            },
        ),
        ("ltm.transaction.commit", {}),
    ]
    begin, commit = recorded.events
    assert recorded.start_time is not None and recorded.end_time is not None
    assert recorded.start_time <= begin.timestamp <= commit.timestamp <= recorded.end_time


def test_a_database_url_naming_no_database_names_no_namespace(
    exported: InMemorySpanExporter,
) -> None:
    tracer = trace.get_tracer("test", tracer_provider=_provider_of(exported))
    with tracer.start_as_current_span("call") as call, tracing.transaction([call], database=None):
        pass
    [(_, begun), _] = _events(_by_name(exported, "call"))
    assert "db.namespace" not in begun


def test_a_batch_s_transaction_is_on_each_sampled_call_and_merges_no_traces(
    exported: InMemorySpanExporter,
) -> None:
    tracer = trace.get_tracer("test", tracer_provider=_provider_of(exported))
    first = tracer.start_span("first call")
    second = tracer.start_span("second call")
    left_out = tracing.LeftOutSpan(trace_id=1, span_id=1)
    with tracing.transaction([first, left_out, second], database="ltm"):
        pass
    first.end()
    second.end()
    calls = [_by_name(exported, "first call"), _by_name(exported, "second call")]
    assert len(exported.get_finished_spans()) == len(calls)
    for call in calls:
        assert not call.links
        [(_, begun), (_, committed)] = _events(call)
        assert begun["messaging.batch.message_count"] == 3  # the batch's, sampled or not
        assert committed == {}


def test_a_transaction_that_fails_is_not_marked_committed(exported: InMemorySpanExporter) -> None:
    tracer = trace.get_tracer("test", tracer_provider=_provider_of(exported))
    with (
        pytest.raises(RuntimeError),
        tracer.start_as_current_span("call") as call,
        tracing.transaction([call], database="ltm"),
    ):
        raise RuntimeError("the database went away")
    # The SDK records the exception on the span that it left.
    names = [name for name, _ in _events(_by_name(exported, "call"))]
    assert names == ["ltm.transaction.begin", "exception"]


def test_a_failure_is_marked_on_the_span(exported: InMemorySpanExporter) -> None:
    with tracing.posting("POST", "/channels/{channel.id}/messages", channel_id="9") as span:
        tracing.failed(span, "403", "Missing Permissions", status_code=403)
    post = _by_name(exported, "POST /channels/{channel.id}/messages")
    assert post.status.status_code is trace.StatusCode.ERROR
    assert (post.attributes or {})["error.type"] == "403"
    assert (post.attributes or {})["http.response.status_code"] == 403


def test_traceparent_and_trace_id_of_a_span(exported: InMemorySpanExporter) -> None:
    assert tracing.traceparent_of(None) is None
    with tracing.posting("GET", "/", channel_id="1") as span:
        stored = tracing.traceparent_of(span)
        trace_id = tracing.trace_id_of(span)
    assert span is not None and stored is not None
    context = span.get_span_context()
    assert stored.split("-")[:3] == ["00", f"{context.trace_id:032x}", f"{context.span_id:016x}"]
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=trace.set_span_in_context(span))
    assert stored == carrier["traceparent"]  # W3C's form, as the propagator writes it
    assert trace_id == f"{context.trace_id:032x}"


def test_log_lines_within_a_sampled_span_carry_its_ids(
    exported: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    stderr = io.StringIO()
    monkeypatch.setattr("sys.stderr", stderr)
    configure_logging("INFO", "json")  # undone after the test by tests/conftest.py
    log = get_logger("test")
    with tracing.posting("POST", "/x", channel_id="1") as span:
        log.info("inside", tool_call_id="c-1")
    log.info("outside")
    with _delivery({"traceparent": TRACEPARENT[:-2] + "00"}) as unsampled:
        assert unsampled is not None and unsampled.get_span_context().is_valid
        log.info("unsampled", tool_call_id="c-2")
    inside, outside, left_out = (json.loads(line) for line in stderr.getvalue().splitlines())
    assert span is not None
    context = span.get_span_context()
    assert (inside["trace_id"], inside["span_id"]) == (
        f"{context.trace_id:032x}",
        f"{context.span_id:016x}",
    )
    assert "trace_id" not in outside and "span_id" not in outside
    # An unsampled call's trace is nowhere to open: its line has its tool_call_id alone.
    assert left_out["tool_call_id"] == "c-2"
    assert "trace_id" not in left_out and "span_id" not in left_out


def test_attribute_names_are_the_semantic_conventions() -> None:
    pairs = [
        (tracing.MESSAGING_SYSTEM, messaging_attributes.MESSAGING_SYSTEM),
        (tracing.MESSAGING_OPERATION_NAME, messaging_attributes.MESSAGING_OPERATION_NAME),
        (tracing.MESSAGING_OPERATION_TYPE, messaging_attributes.MESSAGING_OPERATION_TYPE),
        (tracing.MESSAGING_DESTINATION_NAME, messaging_attributes.MESSAGING_DESTINATION_NAME),
        (
            tracing.MESSAGING_DESTINATION_SUBSCRIPTION_NAME,
            messaging_attributes.MESSAGING_DESTINATION_SUBSCRIPTION_NAME,
        ),
        (
            tracing.MESSAGING_RABBITMQ_ROUTING_KEY,
            messaging_attributes.MESSAGING_RABBITMQ_DESTINATION_ROUTING_KEY,
        ),
        (
            tracing.MESSAGING_RABBITMQ_DELIVERY_TAG,
            messaging_attributes.MESSAGING_RABBITMQ_MESSAGE_DELIVERY_TAG,
        ),
        (tracing.MESSAGING_MESSAGE_ID, messaging_attributes.MESSAGING_MESSAGE_ID),
        (
            tracing.MESSAGING_MESSAGE_CONVERSATION_ID,
            messaging_attributes.MESSAGING_MESSAGE_CONVERSATION_ID,
        ),
        (
            tracing.MESSAGING_BATCH_MESSAGE_COUNT,
            messaging_attributes.MESSAGING_BATCH_MESSAGE_COUNT,
        ),
        (tracing.DB_SYSTEM_NAME, db_attributes.DB_SYSTEM_NAME),
        (tracing.DB_NAMESPACE, db_attributes.DB_NAMESPACE),
        (tracing.HTTP_REQUEST_METHOD, http_attributes.HTTP_REQUEST_METHOD),
        (tracing.HTTP_RESPONSE_STATUS_CODE, http_attributes.HTTP_RESPONSE_STATUS_CODE),
        (tracing.URL_TEMPLATE, url_attributes.URL_TEMPLATE),
        (tracing.ERROR_TYPE, error_attributes.ERROR_TYPE),
    ]
    assert [ours for ours, _ in pairs] == [theirs for _, theirs in pairs]


def _provider_of(exporter: InMemorySpanExporter) -> TracerProvider:
    """A provider exporting to the same place, for the spans a test makes itself."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider
