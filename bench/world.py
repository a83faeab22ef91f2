"""Seeding the bench database fast, and the tool calls that update its memories.

Servers, one persona each, and server memories spread over them are written with
`INSERT ... SELECT generate_series` statements, so that a million memories take seconds.
Every call the bench publishes is a real `ToolCallRequested` that updates one of them.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import orjson
import psycopg

from contracts import (
    UPDATE_LONG_TERM_MEMORY,
    Participant,
    ToolCallContext,
    ToolCallRequested,
)

__all__ = [
    "BOT_USER_ID",
    "Target",
    "call_line",
    "content_for",
    "grow_memories",
    "memory_count",
    "pick_targets",
    "reset_calls",
    "seed_servers",
    "tool_call",
]

BOT_USER_ID: Final = "100000000000000001"
_TRIGGERER: Final = "210987654321098765"
_FRIEND: Final = "310987654321098765"
_CHANNEL: Final = "410987654321098765"


@dataclass(frozen=True, slots=True)
class Target:
    """A server memory a call can update: its id, its server's guild id and the persona."""

    memory_id: int
    guild_id: str
    persona_id: int


async def _execute(url: str, sql: str, params: Sequence[object] = ()) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as connection:
        await connection.execute(sql, params)


async def seed_servers(url: str, servers: int) -> None:
    """`servers` guilds, one persona each (self-teaching on, the default)."""
    await _execute(
        url,
        "INSERT INTO servers (server_disc_id)"
        " SELECT (500000000000000000 + g)::text FROM generate_series(1, %s) AS g",
        (servers,),
    )
    await _execute(
        url,
        "INSERT INTO personas (server_id, persona_lineage_id, nickname)"
        " SELECT server_id, 1000 + server_id, 'Tomori' FROM servers ORDER BY server_id",
    )


async def _count(url: str, sql: str, params: Sequence[object] = ()) -> int:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as connection:
        row = await (await connection.execute(sql, params)).fetchone()
        assert row is not None
        return int(row[0])


async def memory_count(url: str) -> int:
    return await _count(url, "SELECT count(*) FROM server_memories")


async def events_queued_for(url: str, tool_call_id: str) -> int:
    """How many events the worker queued in its outbox for a call (once it committed)."""
    return await _count(
        url, "SELECT count(*) FROM outbox WHERE correlation_id = %s", (tool_call_id,)
    )


async def grow_memories(url: str, total: int) -> float:
    """Adds server memories (round robin over the personas) until there are `total`.

    One statement, then VACUUM ANALYZE, as a table of that size would be in service.
    Returns the seconds it took.
    """
    started = time.perf_counter()
    missing = total - await memory_count(url)
    if missing > 0:
        await _execute(
            url,
            """
            WITH p AS (
                SELECT persona_id, server_id, persona_lineage_id,
                       (row_number() OVER (ORDER BY persona_id)) - 1 AS k,
                       count(*) OVER () AS n
                FROM personas
            )
            INSERT INTO server_memories (server_id, persona_id, persona_lineage_id, content)
            SELECT p.server_id, p.persona_id, p.persona_lineage_id,
                   'Seeded memory ' || g || ': the regulars meet on Fridays at 20:00 UTC'
                   || ' for the weekly movie night; the host picks the film by Thursday.'
            FROM generate_series(1, %s) AS g
            JOIN p ON p.k = g %% p.n
            """,
            (missing,),
        )
    await _execute(url, "VACUUM ANALYZE server_memories")
    await _execute(url, "VACUUM ANALYZE servers")
    await _execute(url, "VACUUM ANALYZE personas")
    return time.perf_counter() - started


async def pick_targets(url: str, count: int, *, seed: int) -> list[Target]:
    """`count` targets, distinct memories drawn at random from the whole table.

    When the table holds fewer memories than `count`, the draw repeats in the same order:
    a memory comes back only after every other one did.
    """
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as connection:
        await connection.execute("SELECT setseed(%s)", (((seed % 1000) / 1000.0),))
        cursor = await connection.execute(
            """
            SELECT m.server_memory_id, s.server_disc_id, p.persona_id
            FROM server_memories AS m
            JOIN servers AS s ON s.server_id = m.server_id
            JOIN personas AS p ON p.persona_id = m.persona_id
            ORDER BY random()
            LIMIT %s
            """,
            (count,),
        )
        rows = await cursor.fetchall()
    if not rows:
        raise RuntimeError("no server memories to update: the seeding did not happen")
    picked = [Target(int(row[0]), str(row[1]), int(row[2])) for row in rows]
    return [picked[i % len(picked)] for i in range(count)]


async def reset_calls(url: str) -> None:
    """Empties what each call adds (inbox, outbox, revisions), so each run starts alike."""
    await _execute(url, "TRUNCATE tool_call_inbox, outbox, memory_revisions")
    await _execute(url, "VACUUM ANALYZE server_memories")


def content_for(number: int) -> str:
    """A memory of realistic length (~150 characters), different for every call."""
    return (
        f"Movie night #{number} moved to Saturdays at 21:00 UTC; the host now posts the poll "
        "in #events by Thursday evening and the winner is announced an hour before."
    )


def tool_call(target: Target, tool_call_id: str, content: str) -> ToolCallRequested:
    """The call a bot shard publishes when the LLM updates a server memory."""
    return ToolCallRequested(
        tool_call_id=tool_call_id,
        tool_name=UPDATE_LONG_TERM_MEMORY,
        arguments={"memory_id": target.memory_id, "memory_content": content},
        context=ToolCallContext(
            guild_id=target.guild_id,
            channel_id=_CHANNEL,
            triggerer_id=_TRIGGERER,
            bot_user_id=BOT_USER_ID,
            persona_id=target.persona_id,
            shard_id=0,
            participants=(
                Participant(
                    user_id=_TRIGGERER, display_label="Alice (@alice)", aliases=("Alice", "alice")
                ),
                Participant(user_id=_FRIEND, display_label="Bob (@bob)", aliases=("Bob", "bob")),
            ),
        ),
    )


def call_line(call: ToolCallRequested) -> bytes:
    """One line of a publisher file: the body and the properties that differ per call."""
    return orjson.dumps(
        {
            "body": call.model_dump_json(),
            "message_id": str(call.event_id),
            "correlation_id": call.tool_call_id,
        }
    )
