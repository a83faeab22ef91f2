"""An aiohttp application served on 127.0.0.1 at a port the system picks: the fake Discord,
the tests' scripted LLM and the bench's span sink each stand in for a server this way."""

from __future__ import annotations

from typing import Any

from aiohttp import web

__all__ = ["serve_on_loopback"]


async def serve_on_loopback(app: web.Application) -> tuple[web.AppRunner, int]:
    """Starts `app` on 127.0.0.1 and returns its runner (`cleanup()` stops it) and port."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    addresses: list[Any] = list(runner.addresses)
    return runner, int(addresses[0][1])
