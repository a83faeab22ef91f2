"""The console's Changes page: the revisions matching a filter, with their word diffs, and
"Revert these": the dry run's plan first, then the reason, then the revert, as
`console:<name>` (the same use cases as `ltm memory changes|revert`).

The revert form carries the plan's fingerprint: when the memories changed between the plan
shown and the click, nothing is written and the new plan is shown instead. The console's
revert never forces: a memory someone else changed since is skipped (`ltm memory revert
--force` is the way to take those too).
"""

from __future__ import annotations

from typing import Any, Final
from urllib.parse import urlencode

import aiohttp_jinja2
from aiohttp import web

from console.security import see_other
from console.state import STATE, session_of
from contracts import RevisionFilter
from infra.observability.logs import get_logger
from operators.changes import PlanChanged, list_changes, planned_revert, revert
from operators.revert_plan import RevertPlan, TooManyMemories
from operators.revision_filter import FILTER_FIELDS, BadRevisionFilter, revision_filter
from operators.word_diff import word_diff

__all__ = ["routes"]

log = get_logger("ltm.console")

# Revisions the page lists at most (`ltm memory changes --limit` lists more).
CHANGES_SHOWN: Final = 200

routes = web.RouteTableDef()


def _fields(source: Any) -> dict[str, str]:
    return {
        name: value.strip() if isinstance(value := source.get(name, ""), str) else ""
        for name in FILTER_FIELDS
    }


def _query(fields: dict[str, str]) -> str:
    return urlencode({name: value for name, value in fields.items() if value})


def _plan_view(plan: RevertPlan) -> dict[str, Any]:
    return {
        "reverts": [(step, word_diff(step.before, step.after)) for step in plan.reverts],
        "skipped": plan.skipped,
        "already": plan.touched - len(plan.reverts) - len(plan.skipped),
        "fingerprint": plan.fingerprint,
    }


@routes.get("/changes")
async def changes_page(request: web.Request) -> web.Response:
    console = request.app[STATE]
    fields = _fields(request.query)
    context: dict[str, Any] = {
        "fields": fields,
        "query": _query(fields),
        "changes": None,
        "problem": None,
        "shown": CHANGES_SHOWN,
    }
    try:
        revisions = revision_filter(fields)
    except BadRevisionFilter as error:
        context["problem"] = str(error)
        return aiohttp_jinja2.render_template("changes.html", request, context, status=400)
    if revisions != RevisionFilter():
        found = await list_changes(console.settings, revisions, limit=CHANGES_SHOWN)
        context["changes"] = [
            (change, word_diff(change.revision.content_before, change.revision.content_after))
            for change in found
        ]
    return aiohttp_jinja2.render_template("changes.html", request, context)


async def _revert_page(
    request: web.Request,
    fields: dict[str, str],
    *,
    plan: RevertPlan | None = None,
    problem: str | None = None,
    status: int = 200,
) -> web.Response:
    """The dry run's plan, and the form that carries it out with a reason."""
    console = request.app[STATE]
    context: dict[str, Any] = {
        "fields": fields,
        "query": _query(fields),
        "plan": None,
        "problem": problem,
    }
    try:
        revisions = revision_filter(fields)
        if revisions == RevisionFilter():
            raise BadRevisionFilter("give at least one filter: a revert of everything is none")
        if plan is None:
            plan = await planned_revert(console.settings, revisions)
    except (BadRevisionFilter, TooManyMemories) as error:
        context["problem"] = str(error)
        return aiohttp_jinja2.render_template("revert.html", request, context, status=400)
    context["plan"] = _plan_view(plan)
    context["touched"] = plan.touched
    return aiohttp_jinja2.render_template("revert.html", request, context, status=status)


@routes.get("/changes/revert")
async def revert_plan_page(request: web.Request) -> web.Response:
    return await _revert_page(request, _fields(request.query))


@routes.post("/changes/revert")
async def revert_changes(request: web.Request) -> web.StreamResponse:
    console, session = request.app[STATE], session_of(request)
    form = await request.post()
    fields = _fields(form)
    reason = form.get("reason", "")
    reason = reason.strip() if isinstance(reason, str) else ""
    approved = form.get("plan", "")
    if not reason:
        return await _revert_page(
            request,
            fields,
            problem="Say why (the reason is recorded): nothing was reverted.",
            status=400,
        )
    try:
        revisions = revision_filter(fields)
        done = await revert(
            console.settings,
            revisions,
            reason=reason,
            actor=session.actor,
            approved=approved if isinstance(approved, str) else "",
        )
    except (BadRevisionFilter, TooManyMemories, ValueError) as error:
        return await _revert_page(request, fields, problem=str(error), status=400)
    except PlanChanged as changed:
        return await _revert_page(
            request,
            fields,
            plan=changed.plan,
            problem="The memories changed since this plan was shown: nothing was reverted. "
            "Check the new plan.",
            status=409,
        )
    log.info(
        "console.memories_reverted",
        operator=session.name,
        tool_call_id=done.tool_call_id,
        reverted=len(done.restored),
        skipped=len(done.plan.skipped),
    )
    if done.tool_call_id is None:
        console.notify(session, "done", "Nothing to revert: every memory is as it should be.")
        return see_other(f"/changes?{_query(fields)}")
    console.notify(
        session,
        "done",
        f"Reverted {len(done.restored)} memory(ies), skipped {len(done.plan.skipped)} "
        f"changed since by someone else. The revert's own revisions are listed below.",
    )
    return see_other(f"/changes?{urlencode({'tool_call': done.tool_call_id})}")
