"""Seeding the bench database fast, and the tool calls that update its memories or create new
ones.

Servers, one persona each, and server memories spread over them are written with
`INSERT ... SELECT generate_series` statements, so that a million memories take seconds.
Every call the bench publishes is a real `ToolCallRequested`: an update of one of those
memories, or a creation in a server of its own, whose scope has room (servers kept apart for
the create tool, each holding a few memories, below the limit, as a server in use would).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

import orjson
import psycopg

from contracts import (
    CREATE_LONG_TERM_MEMORY,
    UPDATE_LONG_TERM_MEMORY,
    Participant,
    ToolCallContext,
    ToolCallRequested,
)

__all__ = [
    "BOT_USER_ID",
    "CREATE_SERVERS_FROM",
    "CallMaker",
    "CreateTarget",
    "SeenUpdates",
    "Target",
    "call_line",
    "content_for",
    "create_call",
    "creations_of",
    "grow_memories",
    "memory_count",
    "pick_create_targets",
    "pick_targets",
    "reset_calls",
    "seed_create_servers",
    "seed_servers",
    "tool_call",
    "updates_of",
]

BOT_USER_ID: Final = "100000000000000001"
_TRIGGERER: Final = "210987654321098765"
_FRIEND: Final = "310987654321098765"
_CHANNEL: Final = "410987654321098765"


# The servers kept for the create tool's calls have guild ids from here on (the others' below).
CREATE_SERVERS_FROM: Final = 600_000_000_000_000_000
_CREATED_PREFIX: Final = "New fact "


@dataclass(frozen=True, slots=True)
class Target:
    """A server memory a call can update: its id, its server's guild id and the persona."""

    memory_id: int
    guild_id: str
    persona_id: int


@dataclass(frozen=True, slots=True)
class CreateTarget:
    """A server whose scope a creation goes to: its guild id and persona."""

    guild_id: str
    persona_id: int


# A run's call number `number`, under `tool_call_id`.
CallMaker = Callable[[str, int], ToolCallRequested]


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


async def seed_create_servers(url: str, servers: int, *, memories_each: int) -> None:
    """`servers` guilds for the create tool, one persona each, holding `memories_each` server
    memories (below the limit, so that the creations of a run fit)."""
    await _execute(
        url,
        "INSERT INTO servers (server_disc_id)"
        " SELECT (%s + g)::text FROM generate_series(1, %s) AS g",
        (CREATE_SERVERS_FROM, servers),
    )
    await _execute(
        url,
        "INSERT INTO personas (server_id, persona_lineage_id, nickname)"
        " SELECT server_id, 1000 + server_id, 'Tomori' FROM servers"
        " WHERE server_disc_id >= %s ORDER BY server_id",
        (str(CREATE_SERVERS_FROM),),
    )
    await _execute(
        url,
        "INSERT INTO server_memories (server_id, persona_id, persona_lineage_id, content)"
        " SELECT p.server_id, p.persona_id, p.persona_lineage_id,"
        "        'Seeded fact ' || g || ' of this server: the regulars meet on Fridays.'"
        " FROM personas AS p JOIN servers AS s ON s.server_id = p.server_id"
        " CROSS JOIN generate_series(1, %s) AS g"
        " WHERE s.server_disc_id >= %s",
        (memories_each, str(CREATE_SERVERS_FROM)),
    )


async def pick_create_targets(url: str) -> list[CreateTarget]:
    """Every server kept for the create tool, in id order."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as connection:
        cursor = await connection.execute(
            "SELECT s.server_disc_id, p.persona_id FROM servers AS s"
            " JOIN personas AS p ON p.server_id = s.server_id"
            " WHERE s.server_disc_id >= %s ORDER BY s.server_id",
            (str(CREATE_SERVERS_FROM),),
        )
        rows = await cursor.fetchall()
    if not rows:
        raise RuntimeError("no servers for the create tool: the seeding did not happen")
    return [CreateTarget(str(row[0]), int(row[1])) for row in rows]


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
            WHERE s.server_disc_id < %s
            ORDER BY random()
            LIMIT %s
            """,
            (str(CREATE_SERVERS_FROM), count),
        )
        rows = await cursor.fetchall()
    if not rows:
        raise RuntimeError("no server memories to update: the seeding did not happen")
    picked = [Target(int(row[0]), str(row[1]), int(row[2])) for row in rows]
    return [picked[i % len(picked)] for i in range(count)]


async def reset_calls(url: str) -> None:
    """Empties what each call adds (inbox, outbox, revisions, the memories creations saved),
    so each run starts alike."""
    await _execute(url, "TRUNCATE tool_call_inbox, outbox, memory_revisions")
    await _execute(
        url,
        "DELETE FROM server_memories AS m USING servers AS s"
        " WHERE s.server_id = m.server_id AND s.server_disc_id >= %s AND m.content LIKE %s",
        (str(CREATE_SERVERS_FROM), _CREATED_PREFIX + "%"),
    )
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


def create_call(target: CreateTarget, tool_call_id: str) -> ToolCallRequested:
    """The call a bot shard publishes when the LLM saves a new server memory; its text (of
    realistic length) is the call's own, so that no two calls of the bench say the same."""
    return ToolCallRequested(
        tool_call_id=tool_call_id,
        tool_name=CREATE_LONG_TERM_MEMORY,
        arguments={
            "memory_content": (
                f"{_CREATED_PREFIX}{tool_call_id}: {{user}} runs the quiz on the first Monday "
                "of the month at 19:00 UTC, and posts the questions in #events the day before."
            ),
            "memory_scope": "server_wide",
        },
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


def updates_of(targets: Sequence[Target]) -> CallMaker:
    """Updates of the targets in turn, each with content of its own number."""
    return lambda tool_call_id, number: tool_call(
        targets[number % len(targets)], tool_call_id, content_for(number)
    )


class SeenUpdates:
    """Updates of the targets in turn, as `updates_of` makes them, each carrying a
    `context.seen` of `entries` memories, as a bot that rendered a listing of that many does:
    the target at its current revision (so that the update applies) and the next targets.

    The revisions are read again when a new run's calls are made (the first call of each run,
    named `<run>:<i>`): every run's calls are made before it is published, and a run updates
    each target once, so that each call is built on the revision its target has then.
    """

    def __init__(self, url: str, targets: Sequence[Target], *, entries: int) -> None:
        self._url = url
        self._targets = targets
        self._entries = entries
        self._run: str | None = None
        self._revisions: dict[int, int] = {}

    def __call__(self, tool_call_id: str, number: int) -> ToolCallRequested:
        run = tool_call_id.rpartition(":")[0]
        if run != self._run:
            self._run, self._revisions = run, self._read_revisions()
        shown = [self._targets[(number + k) % len(self._targets)] for k in range(self._entries)]
        call = tool_call(shown[0], tool_call_id, content_for(number))
        seen = {str(t.memory_id): self._revisions.get(t.memory_id, 0) for t in shown}
        return call.model_copy(update={"context": call.context.model_copy(update={"seen": seen})})

    def _read_revisions(self) -> dict[int, int]:
        with psycopg.connect(self._url, autocommit=True) as connection:
            rows = connection.execute(
                "SELECT server_memory_id, revision_id FROM server_memories"
                " WHERE server_memory_id = ANY(%s)",
                ([target.memory_id for target in self._targets],),
            ).fetchall()
        return {int(memory_id): int(revision_id) for memory_id, revision_id in rows}


def creations_of(targets: Sequence[CreateTarget]) -> CallMaker:
    """Creations in the targets' servers in turn: consecutive calls meet no lock of another."""
    return lambda tool_call_id, number: create_call(targets[number % len(targets)], tool_call_id)


def call_line(call: ToolCallRequested) -> bytes:
    """One line of a publisher file: the body and the properties that differ per call."""
    return orjson.dumps(
        {
            "body": call.model_dump_json(),
            "message_id": str(call.event_id),
            "correlation_id": call.tool_call_id,
            "tool_name": call.tool_name,
        }
    )
