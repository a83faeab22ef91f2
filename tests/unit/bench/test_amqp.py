"""`bench.amqp`: the tool calls the bench publishes."""

from __future__ import annotations

from bench.amqp import dead_letter_headers, outgoing_call
from contracts.dead_letters import ATTEMPTS_HEADER, ERROR_HEADER, FAILED_AT_HEADER


def test_a_call_carries_no_trace_context() -> None:
    # A parent-based sampler follows a caller's sampled flag: the tracing phase measures the
    # worker's own sampling only when its calls come without one.
    call = outgoing_call(b"{}", message_id="m1", correlation_id="run:1")

    headers = call.properties.headers or {}
    assert "traceparent" not in headers and "tracestate" not in headers
    assert headers["schema_version"]


def test_a_dead_letter_is_the_call_with_why_when_and_how_often() -> None:
    call = outgoing_call(b'{"a": 1}', message_id="m1", correlation_id="run:1")
    letter = outgoing_call(
        b'{"a": 1}',
        message_id="m1",
        correlation_id="run:1",
        headers=dead_letter_headers("TimeoutError: bench"),
    )

    assert (letter.body, letter.routing_key) == (call.body, call.routing_key)
    kept = ("message_id", "correlation_id", "message_type", "content_type", "delivery_mode")
    assert [getattr(letter.properties, name) for name in kept] == [
        getattr(call.properties, name) for name in kept
    ]
    headers = letter.properties.headers or {}
    assert headers[ERROR_HEADER] == "TimeoutError: bench"
    assert str(headers[FAILED_AT_HEADER]).endswith("Z")
    assert headers[ATTEMPTS_HEADER] == 1
    assert headers["schema_version"] == (call.properties.headers or {})["schema_version"]
    assert ERROR_HEADER not in (call.properties.headers or {})
