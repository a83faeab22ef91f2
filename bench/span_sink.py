"""An OTLP/HTTP endpoint that takes every batch of spans and drops it.

The bench's traced workers export here: their cost is the whole of tracing on (the spans,
their encoding, the POST every few hundred spans), and nothing is kept or decoded. It only
counts what came, so that the bench can tell that tracing was on.
"""

from __future__ import annotations

from types import TracebackType
from typing import Self

from aiohttp import web

from harness.loopback import serve_on_loopback

__all__ = ["SpanSink"]


class SpanSink:
    """`async with SpanSink() as sink:` serves on 127.0.0.1, a free port; `env()` points a
    process at it."""

    def __init__(self) -> None:
        self.requests = 0
        self.bytes = 0
        self._runner: web.AppRunner | None = None
        self._port: int | None = None

    async def _traces(self, request: web.Request) -> web.Response:
        self.bytes += len(await request.read())
        self.requests += 1
        # An empty ExportTraceServiceResponse: everything accepted.
        return web.Response(body=b"", content_type="application/x-protobuf")

    def env(self, service_name: str) -> dict[str, str]:
        if self._port is None:
            raise RuntimeError("the span sink is not started")
        return {
            "OTEL_SDK_DISABLED": "false",
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{self._port}/v1/traces",
            "OTEL_SERVICE_NAME": service_name,
        }

    async def __aenter__(self) -> Self:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/traces", self._traces)
        self._runner, self._port = await serve_on_loopback(app)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
