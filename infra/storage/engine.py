"""PostgreSQL: the worker's engine, and statements as psycopg runs them.

The stores of the pipeline's transaction (`worker.adapters.inbox`, `memory_writes`,
`memory_creations`, `members`) each own their SQL: SQLAlchemy Core `text()`, compiled once
here for psycopg and prepared by it after a few uses, so that the ORM stays off the hot path.
"""

from __future__ import annotations

from typing import Any, Final

import psycopg
from psycopg.rows import namedtuple_row
from sqlalchemy import TextClause, text
from sqlalchemy.dialects.postgresql import psycopg as psycopg_dialect
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

__all__ = [
    "create_engine",
    "fetch_all",
    "fetch_one",
    "named_cursor",
    "psycopg_sql",
    "session_options",
]

# A plan is cached while a table is small and kept until the table is next analyzed, which
# may be hours of calls away (or never, with autovacuum off): priced as by default, an index
# read looks dearer than reading a small table whole, and the plan goes on reading the table
# whole once it has grown. The working set is cached in memory, where a page read at random
# costs about what a sequential one does (1.1, as for SSDs): priced so, the index wins at
# every size.
_SESSION_OPTIONS: Final = "-c random_page_cost=1.1"


def psycopg_sql(statement: str | TextClause) -> str:
    """The statement as psycopg takes it (`:name` becomes `%(name)s`), compiled once.

    The pipeline's transaction runs on psycopg's own connection: SQLAlchemy's execution
    layer (a greenlet switch and a result wrapper per statement) is work the hot path does
    not need. SQLAlchemy still owns the pool, the other stores and the migrations.
    """
    clause = text(statement) if isinstance(statement, str) else statement
    return str(clause.compile(dialect=_PSYCOPG))


_PSYCOPG: Final = psycopg_dialect.dialect()  # type: ignore[no-untyped-call]


def create_engine(
    url: str,
    *,
    pool_size: int,
    lock_timeout_s: float | None = None,
    application_name: str = "ltm-worker",
    pre_ping: bool = False,
) -> AsyncEngine:
    """An engine whose pool bounds the process's database concurrency; with `lock_timeout_s`,
    a statement waiting longer than that for a lock fails (`LockNotAvailable`).

    `pre_ping` checks a pooled connection before each use: for the console, whose first read
    after a database failover would otherwise fail; the worker's hot path retries instead.
    `application_name` is how `pg_stat_activity` names the process's sessions.
    """
    options = {
        "application_name": application_name,
        "options": session_options(url, lock_timeout_s=lock_timeout_s),
    }
    return create_async_engine(
        url,
        pool_size=pool_size,
        max_overflow=0,
        pool_pre_ping=pre_ping,
        pool_recycle=1800,
        connect_args=options,
    )


def session_options(url: str, *, lock_timeout_s: float | None = None) -> str:
    """The `options` every session of the project connects with (psycopg's `options=`).

    A connect argument replaces the URL's own `options` (a search_path, say): those go after
    the project's, so that what the URL asks for is kept, and wins.
    """
    settings = _SESSION_OPTIONS
    if lock_timeout_s is not None:
        settings += f" -c lock_timeout={lock_timeout_s * 1000:.0f}"
    given = make_url(url).query.get("options")
    if isinstance(given, str) and given.strip():
        settings += f" {given.strip()}"
    return settings


def named_cursor(connection: psycopg.AsyncConnection[Any]) -> psycopg.AsyncCursor[Any]:
    """A cursor whose rows are named tuples: columns read as attributes, as statements name
    them."""
    return connection.cursor(row_factory=namedtuple_row)


async def fetch_all(
    cursor: psycopg.AsyncCursor[Any], statement: str, params: dict[str, Any]
) -> list[Any]:
    await cursor.execute(statement, params)
    return await cursor.fetchall()


async def fetch_one(cursor: psycopg.AsyncCursor[Any], statement: str, **params: Any) -> Any:
    await cursor.execute(statement, params)
    return await cursor.fetchone()
