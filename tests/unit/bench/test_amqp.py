"""`bench.amqp`: the tool calls the bench publishes."""

from __future__ import annotations

from bench.amqp import outgoing_call


def test_a_call_carries_no_trace_context() -> None:
    # A parent-based sampler follows a caller's sampled flag: the tracing phase measures the
    # worker's own sampling only when its calls come without one.
    call = outgoing_call(b"{}", message_id="m1", correlation_id="run:1")

    headers = call.properties.headers or {}
    assert "traceparent" not in headers and "tracestate" not in headers
    assert headers["schema_version"]
