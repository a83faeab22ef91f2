"""The console in this process (aiohttp's test server) on the run's database and a topology
of its own; requests through a client that keeps cookies, as a browser does."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Final

import pytest
from aio_pika.abc import AbstractChannel
from aiohttp.test_utils import TestClient, TestServer
from pydantic import SecretStr

from console.app import create_app
from console.core.sessions import LoginThrottle
from console.passwords import hash_password
from contracts import Topology
from harness.broker import own_topology
from harness.world import World
from infra.settings import Settings

PASSWORD: Final = "correct horse battery"
# One hash for the session: Argon2 takes a tenth of a second each time.
_HASH: Final = hash_password(PASSWORD)
_CSRF: Final = re.compile(r'name="csrf_token" value="([^"]+)"')


@dataclass
class Scene:
    settings: Settings
    topology: Topology
    channel: AbstractChannel
    client: TestClient  # type: ignore[type-arg]
    throttle: LoginThrottle

    async def log_in(self, name: str = "ann", password: str = PASSWORD) -> int:
        response = await self.client.post(
            "/login", data={"name": name, "password": password}, allow_redirects=False
        )
        return response.status

    async def csrf_token(self, page: str = "/dead-letters") -> str:
        response = await self.client.get(page)
        found = _CSRF.search(await response.text())
        assert found is not None, f"no CSRF token on {page}"
        return found.group(1)


def console_settings(settings: Settings, **extra: object) -> Settings:
    return settings.model_copy(
        update={"console_password_hash": SecretStr(_HASH), "console_refresh_s": 0.2, **extra}
    )


@pytest.fixture
async def scene(settings: Settings) -> AsyncIterator[Scene]:
    async with own_topology(settings, "console", publisher_confirms=True) as (own, topology, ch):
        configured = console_settings(own)
        throttle = LoginThrottle(per_address=3, overall=50, window_s=60)
        app = create_app(configured, throttle=throttle)
        async with TestClient(TestServer(app)) as client:
            yield Scene(configured, topology, ch, client, throttle)


# Per module: another module's test may take the run's database away for a moment, which ends
# every open connection.
@pytest.fixture(scope="module")
async def world(settings: Settings) -> AsyncIterator[World]:
    shared = await World(settings.database_url).open()
    yield shared
    await shared.close()
