"""The console's pages: overview, dead letters (replay, purge), memories (with restore), and
the audit stream, filtered, as server-sent events."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping
from typing import Any, Final

import aiohttp_jinja2
import orjson
from aio_pika.abc import AbstractIncomingMessage
from aio_pika.exceptions import ChannelNotFoundEntity
from aiohttp import web

from console.core.audit import ACTIONS, AuditFilter, BadFilter, event_row, unreadable_row
from console.core.bodies import shown_body
from console.core.revisions import diff, revision_views
from console.core.sessions import Session
from console.security import see_other
from console.state import STATE, Console, session_of
from contracts import MemoryChanged
from infra.observability.logs import error_summary, get_logger
from operators.audit_stream import (
    PREFETCH,
    AuditDelivery,
    BadStart,
    StreamStart,
    parse_start,
    stream_offset,
)
from operators.dead_letters import purge, read_dead_letters, replay
from operators.operator_records import record_purge, record_replay
from operators.revision_store import ChangeTexts, RevisionStore, UnchangedMemory
from operators.revisions import restore_revision

__all__ = ["routes"]

log = get_logger("ltm.console")

# Dead letters a page lists at most (`ltm dlq list` lists up to 10,000).
DEAD_LETTERS_SHOWN: Final = 500
# An audit page's stream says it is alive this often, so that proxies keep it open.
KEEPALIVE_S: Final = 15.0

routes = web.RouteTableDef()


def _render(
    request: web.Request, template: str, context: dict[str, Any], status: int = 200
) -> web.Response:
    return aiohttp_jinja2.render_template(template, request, context, status=status)


@routes.get("/healthz")
async def healthz(_: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


# -- overview -------------------------------------------------------------------------------


@routes.get("/")
async def overview_page(request: web.Request) -> web.Response:
    console = request.app[STATE]
    return _render(
        request,
        "overview.html",
        {"refresh_ms": int(console.overview.refresh_s * 1000), "queues": console.overview.queues},
    )


@routes.get("/overview.json")
async def overview_data(request: web.Request) -> web.Response:
    snapshot = await request.app[STATE].overview.snapshot()
    return web.Response(body=orjson.dumps(snapshot), content_type="application/json")


# -- dead letters ---------------------------------------------------------------------------


@routes.get("/dead-letters")
async def dead_letters_page(request: web.Request) -> web.Response:
    return await _dead_letters(request)


async def _dead_letters(
    request: web.Request, *, problem: str | None = None, status: int = 200
) -> web.Response:
    console = request.app[STATE]
    queue = console.topology.dead_letter_queue
    context: dict[str, Any] = {"queue": queue, "problem": problem, "letters": [], "total": 0}
    try:
        held, total = await read_dead_letters(console.settings, limit=DEAD_LETTERS_SHOWN)
    except ChannelNotFoundEntity:
        context["missing"] = True
        return _render(request, "dead_letters.html", context, status=status)
    context["letters"] = [(letter.entry, shown_body(letter.body)) for letter in held]
    context["total"] = total
    return _render(request, "dead_letters.html", context, status=status)


@routes.post("/dead-letters/replay")
async def replay_one(request: web.Request) -> web.StreamResponse:
    event_id = _field(await request.post(), "event_id")
    if not event_id:
        raise web.HTTPBadRequest(text="which dead letter? (event_id is missing): nothing done\n")
    return await _replay(request, event_id)


@routes.post("/dead-letters/replay-all")
async def replay_all(request: web.Request) -> web.StreamResponse:
    return await _replay(request, None)


async def _replay(request: web.Request, event_id: str | None) -> web.StreamResponse:
    console, session = request.app[STATE], session_of(request)
    report = await replay(console.settings, event_id=event_id)
    if report.unknown_id is not None:
        console.notify(
            session,
            "problem",
            f"No dead letter has event id {event_id}: replayed or purged meanwhile? "
            "Nothing was done.",
        )
        return see_other("/dead-letters")
    for entry in report.replayed:
        log.info(
            "console.dead_letter_replayed",
            operator=session.name,
            event_id=entry.event_id,
            tool_call_id=entry.tool_call_id,
        )
    for failed in report.failed:
        log.warning(
            "console.dead_letter_not_replayed",
            operator=session.name,
            event_id=failed.entry.event_id,
            tool_call_id=failed.entry.tool_call_id,
            error=failed.error,
        )
        console.notify(
            session, "problem", f"{failed.entry.event_id} stays dead-lettered: {failed.error}"
        )
    await _record(record_replay(console.settings, report, actor=session.actor), session, "replayed")
    replayed = len(report.replayed)
    calls = ", ".join(entry.tool_call_id or "?" for entry in report.replayed[:5])
    more = f" and {replayed - 5} more" if replayed > 5 else ""
    text = f"Replayed {replayed} dead letter(s): {calls}{more}." if replayed else ""
    if report.whole_queue and report.total == 0:
        text = "There was nothing to replay."
    if report.not_reached:
        text += f" {report.not_reached} not reached: replay again."
    if text:
        console.notify(session, "done", text.strip())
    return see_other("/dead-letters")


@routes.post("/dead-letters/purge")
async def purge_all(request: web.Request) -> web.StreamResponse:
    console, session = request.app[STATE], session_of(request)
    queue = console.topology.dead_letter_queue
    typed = _field(await request.post(), "queue_name").strip()
    if typed != queue:
        return await _dead_letters(
            request,
            problem=f"To purge, type the queue's name, {queue}, exactly. Nothing was removed.",
            status=400,
        )
    done = await purge(console.settings)
    removed = done.removed
    log.warning("console.dead_letters_purged", operator=session.name, removed=removed)
    await _record(record_purge(console.settings, done, actor=session.actor), session, "purged")
    console.notify(session, "done", f"Purged {queue}: {removed} dead letter(s) removed.")
    return see_other("/dead-letters")


async def _record(recording: Awaitable[None], session: Session, action: str) -> None:
    """The audit record of an action already done: a failure here is said, not hidden."""
    try:
        await recording
    except Exception as error:
        log.error(
            "console.audit_record_not_written",
            operator=session.name,
            action=action,
            error=error_summary(error),
        )
        raise web.HTTPInternalServerError(
            text=f"the dead letters were {action}, but the audit record of it could not be "
            f"written ({type(error).__name__}: {error})\n"
        ) from error


# -- memories -------------------------------------------------------------------------------


_SEARCH_FIELDS: Final = ("server", "user", "memory", "text")


@routes.get("/memories")
async def memories_page(request: web.Request) -> web.Response:
    console = request.app[STATE]
    query = {
        name: request.query.get(name, "").strip() for name in ("server", "user", "memory", "text")
    }
    context: dict[str, Any] = {"query": query, "found": None, "problem": None, "views": None}
    if query["memory"]:
        if not query["memory"].isdigit():
            context["problem"] = "A memory id is a number."
            return _render(request, "memories.html", context, status=400)
        if not any(query[name] for name in ("server", "user", "text")):
            raise web.HTTPSeeOther(f"/memories/{int(query['memory'])}")
    if any(query.values()):
        context["found"] = await console.finder.search(
            server=query["server"] or None,
            user_id=query["user"] or None,
            memory_id=int(query["memory"]) if query["memory"] else None,
            contains=query["text"] or None,
        )
    if query["server"]:
        users = [query["user"]] if query["user"] else []
        context["views"] = await console.finder.as_the_llm_sees(query["server"], users)
    return _render(request, "memories.html", context)


@routes.get(r"/memories/{memory_id:\d+}")
async def memory_page(request: web.Request) -> web.Response:
    console = request.app[STATE]
    memory_id = int(request.match_info["memory_id"])
    record = await console.finder.record(memory_id)
    if record is None:
        return _render(
            request,
            "memories.html",
            {
                "query": {"server": "", "user": "", "memory": str(memory_id), "text": ""},
                "found": [],
                "views": None,
                "problem": f"No memory {memory_id}, and no revision of one.",
            },
            status=404,
        )
    views = None
    if record.server_disc_id is not None:
        users = [record.owner_id] if record.owner_id else []
        views = await console.finder.as_the_llm_sees(record.server_disc_id, users)
        if views is not None:
            views = [view for view in views if view.lineage == record.persona_lineage_id]
    return _render(
        request,
        "memory.html",
        {
            "record": record,
            "revisions": revision_views(record.revisions, record.channels),
            "views": views,
        },
    )


@routes.get(r"/memories/{memory_id:\d+}/restore/{revision_id:\d+}")
async def restore_page(request: web.Request) -> web.Response:
    console = request.app[STATE]
    memory_id, revision_id = _ids(request)
    record = await console.finder.record(memory_id)
    revision = None
    if record is not None:
        revision = next((r for r in record.revisions if r.revision_id == revision_id), None)
    if record is None or revision is None:
        raise web.HTTPNotFound(text=f"memory {memory_id} has no revision {revision_id}\n")
    current = None if record.current is None else record.current.content
    # A creation's restore removes the memory; any other puts back what it held before.
    restored = None if revision.action == "created" else revision.content_before
    return _render(
        request,
        "restore.html",
        {
            "record": record,
            "revision": revision,
            "current": current,
            "restored": restored,
            "change": diff(current, restored),
        },
    )


@routes.post(r"/memories/{memory_id:\d+}/restore/{revision_id:\d+}")
async def restore(request: web.Request) -> web.StreamResponse:
    console, session = request.app[STATE], session_of(request)
    memory_id, revision_id = _ids(request)
    record = await console.finder.record(memory_id)
    if record is None or all(r.revision_id != revision_id for r in record.revisions):
        raise web.HTTPNotFound(
            text=f"memory {memory_id} has no revision {revision_id}: nothing done\n"
        )
    restored = await restore_revision(console.settings, revision_id, actor=session.actor)
    if restored is None:
        raise web.HTTPNotFound(text=f"no revision {revision_id}: nothing done\n")
    if isinstance(restored, UnchangedMemory):
        console.notify(
            session,
            "done",
            f"Memory {memory_id} is already as it was before revision {revision_id}: "
            "nothing changed.",
        )
    else:
        new = restored.revision
        log.info(
            "console.memory_restored",
            operator=session.name,
            memory_id=memory_id,
            revision_id=new.revision_id,
            tool_call_id=new.tool_call_id,
        )
        console.notify(
            session,
            "done",
            f"Memory {memory_id} restored as before revision {revision_id} "
            f"(new revision {new.revision_id}).",
        )
    return see_other(f"/memories/{memory_id}")


# -- audit -----------------------------------------------------------------------------------


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
            first = await asyncio.wait_for(deliveries.get(), KEEPALIVE_S)
        except TimeoutError:
            if connection.is_closed:
                return  # the browser reconnects, from its last event, on a new connection
            await response.write(b": alive\n\n")
            continue
        # What has arrived is one batch: its changes' texts come from one query.
        batch = [AuditDelivery.of(first)]
        while not deliveries.empty() and len(batch) < PREFETCH:
            batch.append(AuditDelivery.of(deliveries.get_nowait()))
        matches = [audit_filter.matches(delivery.event) for delivery in batch]
        texts = await RevisionStore(console.engine).texts(
            [
                delivery.event.revision_id
                for delivery, matched in zip(batch, matches, strict=True)
                if matched and isinstance(delivery.event, MemoryChanged)
            ]
        )
        for delivery, matched in zip(batch, matches, strict=True):
            if matched:
                offset = stream_offset(delivery.message)
                data = orjson.dumps(_row(delivery, offset, texts)).decode()
                await response.write(f"id: {offset}\nevent: audit\ndata: {data}\n\n".encode())
            await delivery.message.ack()


def _row(delivery: AuditDelivery, offset: int, texts: Mapping[int, ChangeTexts]) -> dict[str, Any]:
    event, message = delivery.event, delivery.message
    if event is None:
        return unreadable_row(
            offset, message.timestamp, message.routing_key or "", delivery.problem
        )
    found = texts.get(event.revision_id) if isinstance(event, MemoryChanged) else None
    return event_row(event, offset, found)


def _ids(request: web.Request) -> tuple[int, int]:
    return int(request.match_info["memory_id"]), int(request.match_info["revision_id"])


def _field(form: Any, name: str) -> str:
    value = form.get(name)
    return value if isinstance(value, str) else ""
