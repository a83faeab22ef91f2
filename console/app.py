"""`ltm console`: the application, wired from the settings, and running it until a signal."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import signal
import sys
from pathlib import Path
from typing import Any, Final

import aiohttp_jinja2
import jinja2
from aiohttp import web

from console import changes, pages
from console.adapters.broker import BrokerLink
from console.adapters.statistics import CallStatistics
from console.core.sessions import LoginThrottle, Sessions
from console.overview import Overview, watched_queues
from console.passwords import BadPasswordHash, check_hash
from console.security import (
    COOKIE,
    login,
    login_page,
    logout,
    require_session,
    security_headers,
    services_unavailable,
)
from console.state import STATE, Console, Notice
from infra.observability.logs import get_logger
from infra.settings import Settings
from infra.storage.engine import create_engine
from operators.display import ExitCode, shown_time

__all__ = ["ConsoleNotConfigured", "create_app", "password_hash_of", "run_console"]

log = get_logger("ltm.console")

# How long each step of the stop may take before the next one goes on.
_STOP_STEP_S: Final = 5.0

STATIC: Final = Path(__file__).with_name("static")
# The console's own reads; every action opens what it needs, as the commands do.
POOL_SIZE: Final = 4
# Open pages (an audit page streams until it is closed) get this long once Ctrl-C came.
SHUTDOWN_S: Final = 3.0


class ConsoleNotConfigured(ValueError):
    """A setting the console cannot start without."""


def password_hash_of(settings: Settings) -> str:
    if settings.console_password_hash is None:
        raise ConsoleNotConfigured(
            "LTM_CONSOLE_PASSWORD_HASH is not set: make a hash with "
            "`ltm console hash-password` and set it"
        )
    password_hash = settings.console_password_hash.get_secret_value().strip()
    try:
        check_hash(password_hash)
    except BadPasswordHash as error:
        raise ConsoleNotConfigured(str(error)) from None
    return password_hash


def create_app(settings: Settings, *, throttle: LoginThrottle | None = None) -> web.Application:
    """Raises `ConsoleNotConfigured` without a usable `LTM_CONSOLE_PASSWORD_HASH`."""
    password_hash = password_hash_of(settings)
    topology = settings.topology
    engine = create_engine(
        settings.sqlalchemy_url, pool_size=POOL_SIZE, application_name="ltm-console", pre_ping=True
    )
    broker = BrokerLink(settings, topology)
    console = Console(
        settings=settings,
        password_hash=password_hash,
        engine=engine,
        broker=broker,
        overview=Overview(
            CallStatistics(engine),
            broker,
            watched_queues(topology, settings.shard_count),
            settings.console_refresh_s,
        ),
        sessions=Sessions(ttl_s=settings.console_session_ttl_s),
        throttle=throttle or LoginThrottle(),
    )
    app = web.Application(middlewares=[require_session, services_unavailable])
    app[STATE] = console
    app.on_response_prepare.append(security_headers)
    aiohttp_jinja2.setup(
        app,
        loader=jinja2.PackageLoader("console", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        context_processors=[_page_context],
        filters={"when": shown_time},
    )
    app.router.add_get("/login", login_page)
    app.router.add_post("/login", login)
    app.router.add_post("/logout", logout)
    app.add_routes(pages.routes)
    app.add_routes(changes.routes)
    app.router.add_static("/static/", STATIC)
    app.on_startup.append(_start)
    app.on_cleanup.append(_stop)
    return app


async def _page_context(request: web.Request) -> dict[str, Any]:
    console = request.app[STATE]
    session = console.sessions.find(request.cookies.get(COOKIE))
    notices: list[Notice] = [] if session is None else console.take_notices(session)
    return {
        "operator": None if session is None else session.name,
        "csrf_token": None if session is None else session.csrf_token,
        "notices": notices,
        "path": request.path,
        "prefix": console.settings.amqp_prefix,
    }


async def _start(app: web.Application) -> None:
    app[STATE].overview.start()


async def _stop(app: web.Application) -> None:
    console = app[STATE]
    # A stop must not hang on a source that does not answer (a refresh stuck on the broker or
    # the database): each step gets a bounded time, then the next one goes on.
    for step in (console.overview.stop, console.broker.close, console.engine.dispose):
        try:
            await asyncio.wait_for(step(), _STOP_STEP_S)
        except TimeoutError:
            log.warning("console.stop_step_timed_out", step=step.__qualname__)


async def run_console(settings: Settings, host: str, port: int) -> int:
    """Serves until SIGINT or SIGTERM. Exit code 2 without a usable password hash, 1 when the
    port is taken."""
    try:
        app = create_app(settings)
    except ConsoleNotConfigured as error:
        print(f"ltm console: {error}", file=sys.stderr)
        return ExitCode.USAGE
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port, shutdown_timeout=SHUTDOWN_S).start()
    except OSError as error:
        await runner.cleanup()
        taken = error.errno == errno.EADDRINUSE
        why = f"port {port} is in use: pass --port" if taken else str(error)
        print(f"ltm console: cannot listen on {host}:{port}: {why}", file=sys.stderr)
        return ExitCode.FAILED
    log.info("console.listening", url=f"http://{host}:{port}/")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):  # pragma: no cover - not on Windows
            loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        log.info("console.stopping")
        await runner.cleanup()
    return ExitCode.OK
