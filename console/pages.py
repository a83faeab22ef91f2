"""The console's pages: overview, dead letters (replay, purge), memories (with restore), the
audit stream, filtered, as server-sent events, and data requests (export, erasure)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlencode

import aiohttp_jinja2
import orjson
from aio_pika.abc import AbstractIncomingMessage
from aio_pika.exceptions import ChannelNotFoundEntity
from aiohttp import web

from console.core.audit import ACTIONS, AuditFilter, BadFilter, event_row, unreadable_row
from console.core.bodies import shown_body
from console.core.revisions import revision_views
from console.core.sessions import Session
from console.security import see_other
from console.state import STATE, Console, session_of
from contracts import (
    DataRequestCompleted,
    DataRequestRequested,
    MemoryChanged,
    Subject,
)
from infra.observability.logs import error_summary, get_logger
from operators.audit_stream import (
    PREFETCH,
    AuditDelivery,
    BadStart,
    StreamStart,
    parse_start,
    stream_offset,
)
from operators.data_requests import operator_request, request_data
from operators.dead_letters import (
    DEFAULT_RATE,
    DeadLetterFilter,
    ReplayReport,
    group_dead_letters,
    purge,
    read_dead_letters,
    replay,
)
from operators.display import BadTime, parsed_time, shown_time
from operators.operator_records import record_purge, record_replay
from operators.revision_store import ChangeTexts, RevisionStore, UnchangedMemory
from operators.revisions import restore_revision
from operators.tool_call import Unroutable
from operators.word_diff import word_diff

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


# The icon browsers ask for at /favicon.ico, whatever the page says (an SVG: every browser the
# console supports shows one).
_FAVICON: Final = Path(__file__).with_name("static") / "favicon.svg"


@routes.get("/favicon.ico")
async def favicon(_: web.Request) -> web.FileResponse:
    return web.FileResponse(
        _FAVICON,
        headers={"Content-Type": "image/svg+xml", "Cache-Control": "public, max-age=86400"},
    )


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
        {
            "refresh_ms": int(console.overview.refresh_s * 1000),
            "queues": console.overview.queues,
            "audit_stream": console.topology.audit_stream,
        },
    )


@routes.get("/overview.json")
async def overview_data(request: web.Request) -> web.Response:
    snapshot = await request.app[STATE].overview.snapshot()
    return web.Response(body=orjson.dumps(snapshot), content_type="application/json")


# -- dead letters ---------------------------------------------------------------------------


# The dead-letter page's filter fields, as `ltm dlq`'s flags name them.
_FILTER_FIELDS: Final = ("error", "tool", "guild", "since")


class _BadFilter(ValueError):
    """A filter field that is not what it names."""


def _dead_letter_filter(fields: Any) -> DeadLetterFilter:
    """The filter of the page's fields (query or form); empty fields are no criterion."""
    given = {name: _field(fields, name).strip() for name in _FILTER_FIELDS}
    try:
        since = parsed_time(given["since"]) if given["since"] else None
    except BadTime as error:
        raise _BadFilter(f"Failed since: {error}") from None
    return DeadLetterFilter(
        error=given["error"] or None,
        tool=given["tool"] or None,
        guild=given["guild"] or None,
        since=since,
    )


@routes.get("/dead-letters")
async def dead_letters_page(request: web.Request) -> web.Response:
    return await _dead_letters(request)


async def _dead_letters(
    request: web.Request, *, problem: str | None = None, status: int = 200
) -> web.Response:
    console = request.app[STATE]
    queue = console.topology.dead_letter_queue
    fields = {name: request.query.get(name, "").strip() for name in _FILTER_FIELDS}
    grouped = request.query.get("group") == "1"
    try:
        chosen = _dead_letter_filter(request.query)
    except _BadFilter as error:
        problem, status, chosen = str(error), 400, DeadLetterFilter()
    context: dict[str, Any] = {
        "queue": queue,
        "problem": problem,
        "letters": [],
        "total": 0,
        "matching": 0,
        "fields": fields,
        "filtered": not chosen.is_empty,
        "grouped": grouped,
        "groups": [],
        "default_rate": DEFAULT_RATE,
    }
    try:
        held, total = await read_dead_letters(console.settings)
    except ChannelNotFoundEntity:
        context["missing"] = True
        return _render(request, "dead_letters.html", context, status=status)
    matching = [letter for letter in held if chosen.matches(letter.entry)]
    context["letters"] = [
        (letter.entry, shown_body(letter.body)) for letter in matching[:DEAD_LETTERS_SHOWN]
    ]
    context["matching"] = len(matching)
    context["total"] = total
    context["groups"] = group_dead_letters([letter.entry for letter in matching])
    return _render(request, "dead_letters.html", context, status=status)


@routes.post("/dead-letters/replay")
async def replay_one(request: web.Request) -> web.StreamResponse:
    event_id = _field(await request.post(), "event_id")
    if not event_id:
        raise web.HTTPBadRequest(text="which dead letter? (event_id is missing): nothing done\n")
    return await _replay(request, event_id)


@routes.post("/dead-letters/replay-all")
async def replay_all(request: web.Request) -> web.StreamResponse:
    form = await request.post()
    return await _replay(request, None, reason=_field(form, "reason").strip() or None)


@routes.post("/dead-letters/replay-matching")
async def replay_matching(request: web.Request) -> web.StreamResponse:
    """ "Replay matching": the filter's letters, at the rate given, with the reason (required,
    as `ltm dlq replay` requires it)."""
    form = await request.post()
    back = _filtered_page(form)
    try:
        chosen = _dead_letter_filter(form)
    except _BadFilter as error:
        raise web.HTTPBadRequest(text=f"{error}: nothing done\n") from None
    reason = _field(form, "reason").strip()
    rate_text = _field(form, "rate").strip() or str(DEFAULT_RATE)
    try:
        rate = float(rate_text)
    except ValueError:
        rate = -1.0
    console, session = request.app[STATE], session_of(request)
    if not reason or not rate >= 0:
        console.notify(
            session,
            "problem",
            "Say why (the reason is recorded), and give a rate of 0 (no limit) or more calls "
            "a second. Nothing was replayed.",
        )
        return see_other(back)
    return await _replay(
        request, None, dead_letter_filter=chosen, reason=reason, rate=rate, back=back
    )


async def _replay(
    request: web.Request,
    event_id: str | None,
    *,
    dead_letter_filter: DeadLetterFilter | None = None,
    reason: str | None = None,
    rate: float = DEFAULT_RATE,
    back: str = "/dead-letters",
) -> web.StreamResponse:
    console, session = request.app[STATE], session_of(request)
    report = await replay(
        console.settings, event_id=event_id, dead_letter_filter=dead_letter_filter, rate=rate
    )
    if report.unknown_id is not None:
        console.notify(
            session,
            "problem",
            f"No dead letter has event id {event_id}: replayed or purged meanwhile? "
            "Nothing was done.",
        )
        return see_other(back)
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
    await _record(
        record_replay(console.settings, report, actor=session.actor, reason=reason),
        session,
        "replayed",
    )
    console.notify(session, "done", _replay_notice(report))
    return see_other(back)


def _replay_notice(report: ReplayReport) -> str:
    """What a replay did, in a sentence: the tool calls named (a letter without one by its
    event id), at most five."""
    replayed = report.replayed
    if not report.replays and report.dead_letter_filter is not None:
        text = "No dead letter matched: nothing was replayed."
    elif not report.replays and report.whole_queue:
        text = "There was nothing to replay."
    elif replayed:
        named = ", ".join(
            entry.tool_call_id
            or (
                f"event {entry.event_id} (no tool call id)" if entry.event_id else "one with no ids"
            )
            for entry in replayed[:5]
        )
        more = f" and {len(replayed) - 5} more" if len(replayed) > 5 else ""
        text = f"Replayed {len(replayed)} dead letter(s): {named}{more}."
    else:
        text = "Nothing was replayed."
    if report.not_reached:
        text += f" {report.not_reached} not reached: replay again."
    return text


def _filtered_page(form: Any) -> str:
    """The dead-letter page with the filter of `form` (where a filtered action goes back to)."""
    query = {name: _field(form, name).strip() for name in (*_FILTER_FIELDS, "group")}
    kept = {name: value for name, value in query.items() if value}
    return "/dead-letters" + (f"?{urlencode(kept)}" if kept else "")


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
            "change": word_diff(current, restored),
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
        # The last hour by default: "last" (the stream's last chunk) often shows nothing.
        start = request.query.get("from", "").strip() or _an_hour_ago()
        parse_start(start)
    except (BadFilter, BadStart) as error:
        problem, audit_filter, start = str(error), AuditFilter(), _an_hour_ago()
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


def _an_hour_ago() -> str:
    return shown_time(datetime.now(UTC) - timedelta(hours=1))


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


# -- data requests --------------------------------------------------------------------------


# How long the page waits for the worker's answer.
DATA_REQUEST_TIMEOUT_S: Final = 60.0


@routes.get("/data-requests")
async def data_requests_page(request: web.Request) -> web.Response:
    return await _data_requests(request)


async def _data_requests(
    request: web.Request,
    *,
    problem: str | None = None,
    status: int = 200,
    exported: DataRequestCompleted | None = None,
    form: dict[str, str] | None = None,
) -> web.Response:
    records = request.app[STATE].data_requests
    document = None
    if exported is not None and exported.document is not None:
        document = orjson.dumps(
            exported.document.model_dump(mode="json"), option=orjson.OPT_INDENT_2
        ).decode()
    context: dict[str, Any] = {
        "rows": await records.requests(),
        "unretracted": await records.unretracted(),
        "problem": problem,
        "exported": exported,
        "document": document,
        "form": form or {},
    }
    return _render(request, "data_requests.html", context, status=status)


@routes.post("/data-requests/export")
async def export_user(request: web.Request) -> web.StreamResponse:
    session = session_of(request)
    form = await request.post()
    user_id = _field(form, "user_id").strip()
    if not user_id.isdigit():
        return await _data_requests(
            request, problem="A user id is a Discord id: digits only.", status=400
        )
    asked = operator_request("export", Subject(user_id=user_id), session.actor)
    log.info(
        "console.export_requested",
        operator=session.name,
        request_id=asked.request_id,
        subject_id=user_id,
    )
    answer = await _ask(request, asked)
    if isinstance(answer, web.Response):
        return answer
    if answer.status != "done" or answer.document is None:
        return await _data_requests(
            request, problem=f"The export was refused ({answer.reason}).", status=409
        )
    if _field(form, "download"):
        body = orjson.dumps(answer.document.model_dump(mode="json"), option=orjson.OPT_INDENT_2)
        return web.Response(
            body=body,
            content_type="application/json",
            headers={"Content-Disposition": f'attachment; filename="export-{user_id}.json"'},
        )
    return await _data_requests(request, exported=answer, form={"user_id": user_id})


@routes.post("/data-requests/erase")
async def erase_subject(request: web.Request) -> web.StreamResponse:
    console, session = request.app[STATE], session_of(request)
    form = await request.post()
    kind = _field(form, "subject_kind")
    subject_id = _field(form, "subject_id").strip()
    typed = _field(form, "confirm_id").strip()
    reason = _field(form, "reason").strip()
    kept = {"subject_kind": kind, "subject_id": subject_id, "reason": reason}
    problem = None
    if kind not in ("user", "guild") or not subject_id.isdigit():
        problem = "Choose a user or a server, and give its Discord id (digits only)."
    elif typed != subject_id:
        problem = (
            f"To erase, type the id {subject_id} again, exactly, in the confirmation. "
            "Nothing was erased."
        )
    elif not reason:
        problem = "Say why (the reason): nothing was erased."
    if problem is not None:
        return await _data_requests(request, problem=problem, status=400, form=kept)
    subject = Subject(user_id=subject_id) if kind == "user" else Subject(guild_id=subject_id)
    asked = operator_request(
        "erase",
        subject,
        session.actor,
        strict=kind == "user" and bool(_field(form, "strict")),
        keep_learning=kind == "user" and bool(_field(form, "keep_learning")),
        stated_reason=reason,
    )
    # Who asked, for what: the reason travels with the request (`stated_reason`) and stays
    # out of the log, which an erasure cannot reach.
    log.warning(
        "console.erasure_requested",
        operator=session.name,
        request_id=asked.request_id,
        subject_kind=kind,
        subject_id=subject_id,
    )
    answer = await _ask(request, asked)
    if isinstance(answer, web.Response):
        return answer
    if answer.status != "done":
        console.notify(session, "problem", f"The erasure was refused ({answer.reason}).")
    else:
        receipt = answer.receipt.model_dump() if answer.receipt is not None else {}
        counted = ", ".join(f"{name} {count}" for name, count in receipt.items())
        console.notify(session, "done", f"Erased {kind} {subject_id}: {counted}.")
    return see_other("/data-requests")


async def _ask(
    request: web.Request, asked: DataRequestRequested
) -> DataRequestCompleted | web.Response:
    """The answer to `asked`, or the page saying why there is none."""
    settings = request.app[STATE].settings
    try:
        return await request_data(settings, asked, timeout=DATA_REQUEST_TIMEOUT_S)
    except Unroutable:
        problem = "No queue takes data requests: run ltm topology. Nothing was asked."
        return await _data_requests(request, problem=problem, status=503)
    except ChannelNotFoundEntity:
        problem = "The broker has no topology: run ltm topology. Nothing was asked."
        return await _data_requests(request, problem=problem, status=503)
    except TimeoutError:
        problem = (
            f"No answer within {DATA_REQUEST_TIMEOUT_S:g} s (request {asked.request_id}): "
            "the worker may be away; the request stays queued and will be answered."
        )
        return await _data_requests(request, problem=problem, status=504)


def _ids(request: web.Request) -> tuple[int, int]:
    return int(request.match_info["memory_id"]), int(request.match_info["revision_id"])


def _field(form: Any, name: str) -> str:
    value = form.get(name)
    return value if isinstance(value, str) else ""
