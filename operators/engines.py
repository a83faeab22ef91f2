"""The database engine of one operator action: a single connection, disposed at the end."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy.ext.asyncio import AsyncEngine

from infra.settings import Settings
from infra.storage.engine import create_engine

__all__ = ["one_shot_engine"]


@asynccontextmanager
async def one_shot_engine(settings: Settings) -> AsyncIterator[AsyncEngine]:
    """An engine of one connection for a command that runs once; the console keeps its own."""
    engine = create_engine(settings.sqlalchemy_url, pool_size=1, application_name="ltm-command")
    try:
        yield engine
    finally:
        await engine.dispose()
