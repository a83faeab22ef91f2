"""The batch's statements find their rows through the index at every size of the tables that
grow with use (the inbox with each call, the servers and personas with each guild): neither a
plan cached while a table was small, nor the hundred rows the planner expects of a batch's
JSON, makes a call read a whole table; and the settings that see to it leave those of the
database URL in force."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from contracts import MemoryStatus, ResultData
from infra.settings import Settings
from infra.storage.engine import create_engine, named_cursor
from tests.integration.worker.checks import Pipeline
from worker.adapters.inbox import PostgresInbox
from worker.tools.base import result_for

# Rows enough that reading the table whole costs a call milliseconds, and few enough that a
# batch's JSON, counted as a hundred rows, makes reading it whole look cheaper than the index.
GROWN_TO = 10_000
# More executions than psycopg runs before it prepares a statement (5) and the server plans
# for each execution before it settles on a cached generic plan (5).
EXECUTIONS = 16


class _RolledBack(Exception):
    """Ends the test's transaction without a commit: the rows it grew the tables by go."""


async def scans(connection: psycopg.AsyncConnection[Any]) -> dict[str, tuple[int, int]]:
    """(sequential, index) scans of each table so far in this transaction, by this session."""
    cursor = await connection.execute(
        "SELECT relname, seq_scan, coalesce(idx_scan, 0) FROM pg_stat_xact_user_tables"
        " WHERE relname IN ('tool_call_inbox', 'servers', 'personas')"
    )
    return {name: (seq, idx) for name, seq, idx in await cursor.fetchall()}


async def test_claim_and_finish_keep_to_the_index_as_the_tables_grow(pipeline: Pipeline) -> None:
    scene = await pipeline.guild()
    with pytest.raises(_RolledBack):
        async with pipeline.store.driver_transaction() as connection:
            inbox = PostgresInbox(named_cursor(connection), {})

            async def one_call() -> None:
                call = scene.call({"memory_id": 1, "memory_content": "x"})
                [claim] = await inbox.claim([call])
                assert claim.state is not None
                answer = result_for(call, MemoryStatus.UPDATED, "done", ResultData(memory_id=1))
                await inbox.finish([answer], [])

            # Plans made and cached while the tables are as small as the test run left them ...
            for _ in range(EXECUTIONS):
                await one_call()
            await connection.execute(
                "INSERT INTO tool_call_inbox (tool_call_id, event_id, tool_name, channel_id,"
                " shard_id, status) SELECT 'grown-' || n, gen_random_uuid(), 'update', '1', 0,"
                " 'done' FROM generate_series(1, %s) AS n",
                (GROWN_TO,),
            )
            await connection.execute(
                "INSERT INTO servers (server_disc_id) SELECT 'grown-' || n"
                " FROM generate_series(1, %s) AS n",
                (GROWN_TO,),
            )
            before = await scans(connection)
            # ... are still the plans once they have grown: each call must find its rows by
            # their keys.
            for _ in range(EXECUTIONS):
                await one_call()
            after = await scans(connection)
            raise _RolledBack

    for table in ("tool_call_inbox", "servers", "personas"):
        assert after[table][0] == before[table][0], f"{table} read whole: {before} -> {after}"
        assert after[table][1] > before[table][1], f"{table} not read by index: {after}"


async def test_the_session_s_settings_keep_those_of_the_url(settings: Settings) -> None:
    url = make_url(settings.sqlalchemy_url).update_query_dict(
        {"options": "-c statement_timeout=12345 -c random_page_cost=2"}
    )
    engine = create_engine(url.render_as_string(hide_password=False), pool_size=1)
    try:
        async with engine.connect() as connection:
            timeout = await connection.scalar(text("SHOW statement_timeout"))
            page_cost = await connection.scalar(text("SHOW random_page_cost"))
    finally:
        await engine.dispose()

    assert timeout == "12345ms"
    # The URL's own value wins over the project's.
    assert page_cost == "2"
