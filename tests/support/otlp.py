"""An OTLP/HTTP trace receiver of the test's own: what the processes under test export.

A threaded HTTP server on 127.0.0.1 (a free port) that takes `POST /v1/traces` with an
`ExportTraceServiceRequest` in protobuf (gzip or not), as the SDK's OTLP/HTTP exporter sends
it, decodes it with `opentelemetry-proto`, and keeps every span. `env()` is what a process
needs to export there.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan

from harness.waiting import eventually

__all__ = ["OtlpReceiver", "ReceivedSpan", "SpanKind"]

# `Span.SpanKind` of the protocol, by name.
SpanKind = ProtoSpan.SpanKind


@dataclass(frozen=True, slots=True)
class ReceivedSpan:
    """One span as it arrived; ids as lowercase hex, as trace viewers show them."""

    service: str
    name: str
    kind: int
    trace_id: str
    span_id: str
    parent_span_id: str | None
    start_ns: int
    end_ns: int
    attributes: Mapping[str, Any]
    links: tuple[tuple[str, str], ...]  # (trace id, span id) of each link
    status_code: int
    # (name, time, attributes) of each event, in the order recorded
    events: tuple[tuple[str, int, Mapping[str, Any]], ...] = ()

    @property
    def is_root(self) -> bool:
        return self.parent_span_id is None


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    return None if which is None else getattr(value, which)


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs if isinstance(pair, KeyValue)}


def decode(body: bytes) -> list[ReceivedSpan]:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans: list[ReceivedSpan] = []
    for resource_spans in request.resource_spans:
        service = str(_attributes(resource_spans.resource.attributes).get("service.name", ""))
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    ReceivedSpan(
                        service=service,
                        name=span.name,
                        kind=span.kind,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex() or None,
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        attributes=_attributes(span.attributes),
                        links=tuple(
                            (link.trace_id.hex(), link.span_id.hex()) for link in span.links
                        ),
                        status_code=span.status.code,
                        events=tuple(
                            (event.name, event.time_unix_nano, _attributes(event.attributes))
                            for event in span.events
                        ),
                    )
                )
    return spans


class OtlpReceiver:
    """Collects the spans exported to it; use as a context manager (it serves meanwhile)."""

    def __init__(self) -> None:
        self._spans: list[ReceivedSpan] = []
        self._lock = threading.Lock()
        self.requests = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_error(404)
                    return
                received = decode(body)
                with receiver._lock:
                    receiver._spans.extend(received)
                    receiver.requests += 1
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1/traces"

    def env(self, service_name: str) -> dict[str, str]:
        """A process's settings to export here, each batch of spans within 50 ms."""
        return {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": self.endpoint,
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
            "OTEL_SERVICE_NAME": service_name,
            "OTEL_BSP_SCHEDULE_DELAY": "50",
        }

    def spans(
        self, predicate: Callable[[ReceivedSpan], bool] = lambda _: True
    ) -> list[ReceivedSpan]:
        with self._lock:
            return [span for span in self._spans if predicate(span)]

    def trace(self, trace_id: str) -> list[ReceivedSpan]:
        """The spans of one trace, in the order they started."""
        return sorted(self.spans(lambda span: span.trace_id == trace_id), key=lambda s: s.start_ns)

    async def wait_for(
        self,
        predicate: Callable[[list[ReceivedSpan]], bool],
        *,
        timeout: float = 20.0,
        what: str = "spans",
    ) -> list[ReceivedSpan]:
        """Until `predicate` holds for every span received so far; returns them."""

        async def holds() -> list[ReceivedSpan] | None:
            spans = self.spans()
            return spans if predicate(spans) else None

        return await eventually(holds, timeout=timeout, what=what)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
