"""The gateway's own connection pool to the database it shares with the worker."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from infra.settings import Settings

__all__ = ["open_engine"]


def open_engine(settings: Settings, *, pool_size: int = 2) -> AsyncEngine:
    """A small pool, connecting on first use; a connection found dead is replaced."""
    return create_async_engine(
        settings.sqlalchemy_url,
        pool_size=pool_size,
        max_overflow=2,
        pool_pre_ping=True,
        connect_args={"application_name": "ltm-gateway"},
    )
