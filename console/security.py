"""Logging in and out, the session every page but the login needs, the CSRF token every
change needs, and the headers every response carries."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Final
from urllib.parse import quote, urlsplit

import aiohttp_jinja2
import sqlalchemy.exc
from aiohttp import web
from aiormq.exceptions import AMQPError

from console.core.sessions import csrf_matches, operator_name
from console.passwords import verify_password
from console.state import STATE, session_of, set_session
from infra.observability.logs import error_summary, get_logger

__all__ = [
    "COOKIE",
    "CSRF_FIELD",
    "CSRF_HEADER",
    "login",
    "login_page",
    "logout",
    "require_session",
    "security_headers",
    "see_other",
    "services_unavailable",
]

log = get_logger("ltm.console")

COOKIE: Final = "ltm_console"
CSRF_FIELD: Final = "csrf_token"
CSRF_HEADER: Final = "X-CSRF-Token"
# Reachable without a session: the login itself, what its page needs, and the health check.
_PUBLIC: Final = ("/login", "/healthz", "/favicon.ico")
_PUBLIC_PREFIXES: Final = ("/static/",)
# Pages a script reads: without a session they answer 401 rather than a login page.
_SCRIPT_PATHS: Final = ("/overview.json", "/audit/events")
_SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})

# Everything from the console itself; nothing inline, nothing framed, forms only to itself.
_HEADERS: Final = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
        "frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def security_headers(request: web.Request, response: web.StreamResponse) -> None:
    """`on_response_prepare`: on every response, errors and static files included."""
    response.headers.update(_HEADERS)
    if not request.path.startswith(_PUBLIC_PREFIXES):
        response.headers["Cache-Control"] = "no-store"


@web.middleware
async def require_session(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A page without a session goes to the login (a script gets 401); a change without its
    session's CSRF token is refused with 403. Either way nothing is done."""
    if request.path in _PUBLIC or request.path.startswith(_PUBLIC_PREFIXES):
        return await handler(request)
    console = request.app[STATE]
    session = console.sessions.find(request.cookies.get(COOKIE))
    if session is None:
        if request.method in _SAFE_METHODS and request.path not in _SCRIPT_PATHS:
            raise web.HTTPSeeOther(f"/login?next={quote(request.path_qs, safe='')}")
        raise web.HTTPUnauthorized(text="log in first: nothing was done\n")
    if request.method not in _SAFE_METHODS:
        form = await request.post()
        presented = request.headers.get(CSRF_HEADER) or form.get(CSRF_FIELD)
        if not csrf_matches(session, presented if isinstance(presented, str) else None):
            log.warning(
                "console.csrf_refused",
                operator=session.name,
                path=request.path,
            )
            raise web.HTTPForbidden(
                text="this change lacks the page's CSRF token (reload the page): nothing was done\n"
            )
    set_session(request, session)
    return await handler(request)


@web.middleware
async def services_unavailable(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A broker or database that does not answer: a page that says which (503), not a
    traceback."""
    failure: Exception
    try:
        return await handler(request)
    except (AMQPError, OSError) as error:
        service, failure = "broker", error
    except (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError) as error:
        service, failure = "database", error
    log.error(
        "console.service_silent", service=service, path=request.path, error=error_summary(failure)
    )
    return aiohttp_jinja2.render_template(
        "unavailable.html",
        request,
        {"service": service, "error": f"{type(failure).__name__}: {failure}"},
        status=503,
    )


def _local_path(target: str | None) -> str:
    """Where to go after the login: a path of this console only, never another site."""
    if not target:
        return "/"
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//"):
        return "/"
    return target


async def login_page(request: web.Request) -> web.Response:
    return aiohttp_jinja2.render_template(
        "login.html", request, {"next": _local_path(request.query.get("next")), "problem": None}
    )


async def login(request: web.Request) -> web.StreamResponse:
    console = request.app[STATE]
    form = await request.post()
    target = _local_path(_text(form.get("next")))
    address = request.remote or "unknown"
    wait = console.throttle.retry_after(address)
    if wait is not None:
        log.warning("console.login_throttled", address=address)
        response = _login_again(request, target, "Too many failed logins: try again later.", 429)
        response.headers["Retry-After"] = str(math.ceil(wait))
        return response
    name = operator_name(_text(form.get("name")))
    password = _text(form.get("password"))
    if name is None:
        return _login_again(
            request,
            target,
            "Your name, please: letters, digits, '.', '_' or '-' (it is recorded with "
            "every change you make).",
            400,
        )
    if not await verify_password(console.password_hash, password):
        console.throttle.failed(address)
        log.warning("console.login_failed", operator=name, address=address)
        return _login_again(request, target, "Wrong password.", 401)
    console.throttle.succeeded(address)
    token, _ = console.sessions.open(name)
    log.info("console.logged_in", operator=name, address=address)
    response = see_other(target)
    response.set_cookie(
        COOKIE,
        token,
        httponly=True,
        samesite="Strict",
        secure=request.secure or console.settings.console_behind_tls,
        path="/",
        max_age=int(console.settings.console_session_ttl_s),
    )
    return response


async def logout(request: web.Request) -> web.StreamResponse:
    console = request.app[STATE]
    session = session_of(request)
    console.sessions.close(request.cookies.get(COOKIE))
    console.take_notices(session)
    log.info("console.logged_out", operator=session.name)
    response = see_other("/login")
    response.del_cookie(COOKIE, path="/")
    return response


def see_other(location: str) -> web.Response:
    """After a change, the page to show (303: the browser fetches it with GET)."""
    return web.Response(status=303, headers={"Location": location})


def _login_again(request: web.Request, target: str, problem: str, status: int) -> web.Response:
    return aiohttp_jinja2.render_template(
        "login.html", request, {"next": target, "problem": problem}, status=status
    )


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""
