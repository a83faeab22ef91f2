"""The console's audit page: the audit stream, filtered, as server-sent events."""

from __future__ import annotations

import asyncio
from typing import Final

import aiohttp_jinja2
import orjson
from aio_pika.abc import AbstractIncomingMessage
from aio_pika.exceptions import ChannelNotFoundEntity
from aiohttp import web

from console.core.audit import ACTIONS, AuditFilter, BadFilter, event_row, unreadable_row
from console.state import STATE, Console
from contracts import Event, InvalidEnvelope, decode_event
from operators.audit_stream import BadStart, StreamStart, parse_start, stream_offset

__all__ = ["routes"]

# An audit page's stream says it is alive this often, so that proxies keep it open.
KEEPALIVE_S: Final = 15.0

routes = web.RouteTableDef()


@routes.get("/audit")
async def audit_page(request: web.Request) -> web.Response:
    problem = None
    try:
        audit_filter = AuditFilter.parse(request.query)
        start = request.query.get("from", "last").strip() or "last"
        parse_start(start)
    except (BadFilter, BadStart) as error:
        problem, audit_filter, start = str(error), AuditFilter(), "last"
    return aiohttp_jinja2.render_template(
        "audit.html",
        request,
        {
            "filter": audit_filter,
            "start": start,
            "actions": ACTIONS,
            "problem": problem,
            "stream": request.app[STATE].topology.audit_stream,
        },
        status=400 if problem else 200,
    )


@routes.get("/audit/events")
async def audit_events(request: web.Request) -> web.StreamResponse:
    """Server-sent events: the stream from `from` (or from after the `Last-Event-ID` the
    browser sends when it reconnects), the events that match the filter."""
    console = request.app[STATE]
    try:
        audit_filter = AuditFilter.parse(request.query)
        origin: StreamStart = parse_start(request.query.get("from", "last") or "last")
    except (BadFilter, BadStart) as error:
        raise web.HTTPBadRequest(text=f"{error}\n") from None
    resumed = request.headers.get("Last-Event-ID", "")
    if resumed.isdigit():
        origin = int(resumed) + 1
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "X-Accel-Buffering": "no"}
    )
    await response.prepare(request)
    try:
        async with console.broker.audit_stream(origin) as deliveries:
            await _send_events(response, deliveries, audit_filter, console)
    except ChannelNotFoundEntity:
        await response.write(
            b"event: problem\ndata: the audit stream does not exist: run ltm topology\n\n"
        )
    except ConnectionResetError:
        pass  # the page went away
    return response


async def _send_events(
    response: web.StreamResponse,
    deliveries: asyncio.Queue[AbstractIncomingMessage],
    audit_filter: AuditFilter,
    console: Console,
) -> None:
    connection = await console.broker.connection()
    await response.write(b": attached\n\n")
    while True:
        try:
            message = await asyncio.wait_for(deliveries.get(), KEEPALIVE_S)
        except TimeoutError:
            if connection.is_closed:
                return  # the browser reconnects, from its last event, on a new connection
            await response.write(b": alive\n\n")
            continue
        offset = stream_offset(message)
        event: Event | None
        try:
            event = decode_event(message.body)
            row = event_row(event, offset)
        except InvalidEnvelope as error:
            event = None
            row = unreadable_row(offset, message.timestamp, message.routing_key or "", str(error))
        if audit_filter.matches(event):
            data = orjson.dumps(row).decode()
            await response.write(f"id: {offset}\nevent: audit\ndata: {data}\n\n".encode())
        await message.ack()
