"""Seeding the real database with servers, personas, people and memories, and reading it back.

Every id is fresh (random snowflakes, new rows), so tests share one database without
cleaning up and without seeing each other's rows.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from dataclasses import dataclass, field
from typing import Any, Final

import psycopg
from psycopg.rows import dict_row

from contracts import (
    UPDATE_LONG_TERM_MEMORY,
    Participant,
    ToolCallContext,
    ToolCallRequested,
)
from harness.snowflake import snowflake

__all__ = ["BOT_USER_ID", "Persona", "Server", "World", "participant", "tool_call"]

# The bot's own Discord id in the calls of a run (a guild member, as a bot, where seeded so).
BOT_USER_ID: Final = "100000000000000001"


@dataclass(frozen=True)
class Server:
    server_id: int
    disc_id: str
    is_dm: bool = False

    @property
    def guild_id(self) -> str | None:
        return None if self.is_dm else self.disc_id


@dataclass(frozen=True)
class Persona:
    persona_id: int
    server: Server
    lineage: int
    nickname: str


def participant(
    user_id: str,
    *aliases: str,
    label: str | None = None,
    is_bot: bool = False,
    is_member: bool = True,
) -> Participant:
    return Participant(
        user_id=user_id,
        display_label=label or (aliases[0] if aliases else user_id),
        aliases=aliases,
        is_bot=is_bot,
        is_member=is_member,
    )


def tool_call(
    persona: Persona,
    arguments: Any,
    *,
    triggerer_id: str,
    participants: tuple[Participant, ...] = (),
    channel_id: str | None = None,
    bot_user_id: str = BOT_USER_ID,
    shard_id: int = 0,
    tool_call_id: str | None = None,
    persona_id: int | None = None,
    tool_name: str = UPDATE_LONG_TERM_MEMORY,
    triggerer_is_manager: bool = False,
) -> ToolCallRequested:
    return ToolCallRequested(
        tool_call_id=tool_call_id or f"call-{uuid.uuid4()}",
        tool_name=tool_name,
        arguments=arguments,
        context=ToolCallContext(
            guild_id=persona.server.guild_id,
            channel_id=channel_id or snowflake(),
            triggerer_id=triggerer_id,
            bot_user_id=bot_user_id,
            persona_id=persona.persona_id if persona_id is None else persona_id,
            shard_id=shard_id,
            participants=participants,
            triggerer_is_manager=triggerer_is_manager,
        ),
    )


@dataclass
class World:
    """Writes rows the way the bot would have, through plain SQL on the test database.

    A connection per statement by default; after `open()`, one autocommit connection kept
    until `close()`, for tests that seed a dozen rows per case (where a connection per
    statement would cost more than the code under test).
    """

    database_url: str
    _lineages: set[int] = field(default_factory=set)
    _shared: bool = False
    _connection: psycopg.AsyncConnection[Any] | None = None
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def open(self) -> World:
        """From now on every statement goes through one connection, kept (and reopened if
        lost) until `close()`."""
        async with self._lock:
            self._shared = True
            if self._connection is None or self._connection.closed:
                self._connection = await self._connect()
        return self

    async def close(self) -> None:
        async with self._lock:
            self._shared = False
            if self._connection is not None:
                await self._connection.close()
                self._connection = None

    async def execute(self, sql: str, *params: Any) -> list[dict[str, Any]]:
        """Plain SQL in autocommit: the rows it returns, as dicts (none for a statement)."""
        if not self._shared:
            async with await self._connect() as connection:
                return await _rows(connection, sql, params)
        async with self._lock:
            if self._connection is None or self._connection.closed:
                self._connection = await self._connect()
            return await _rows(self._connection, sql, params)

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(self.database_url, autocommit=True)

    async def server(
        self,
        disc_id: str | None = None,
        *,
        is_dm: bool = False,
        self_teaching_enabled: bool | None = None,
        personal_memories_enabled: bool | None = None,
    ) -> Server:
        disc_id = disc_id or snowflake()
        rows = await self.execute(
            "INSERT INTO servers (server_disc_id) VALUES (%s) RETURNING server_id", disc_id
        )
        server = Server(rows[0]["server_id"], disc_id, is_dm)
        if self_teaching_enabled is not None or personal_memories_enabled is not None:
            await self.execute(
                "INSERT INTO server_configs (server_id, self_teaching_enabled,"
                " personal_memories_enabled) VALUES (%s, %s, %s)",
                server.server_id,
                True if self_teaching_enabled is None else self_teaching_enabled,
                True if personal_memories_enabled is None else personal_memories_enabled,
            )
        return server

    async def set_self_teaching(self, server: Server, enabled: bool) -> None:
        await self.execute(
            "INSERT INTO server_configs (server_id, self_teaching_enabled) VALUES (%s, %s)"
            " ON CONFLICT (server_id) DO UPDATE SET self_teaching_enabled = EXCLUDED"
            ".self_teaching_enabled",
            server.server_id,
            enabled,
        )

    async def set_edit_policy(self, server: Server, policy: str) -> None:
        """`server_configs.memory_edit_policy` of the server (`anyone`, `teacher_or_manager`)."""
        await self.execute(
            "INSERT INTO server_configs (server_id, memory_edit_policy) VALUES (%s, %s)"
            " ON CONFLICT (server_id) DO UPDATE SET memory_edit_policy = EXCLUDED"
            ".memory_edit_policy",
            server.server_id,
            policy,
        )

    def new_lineage(self) -> int:
        while True:
            lineage = random.randint(1_000, 2**40)
            if lineage not in self._lineages:
                self._lineages.add(lineage)
                return lineage

    async def persona(
        self, server: Server, *, lineage: int | None = None, nickname: str = "Tomori"
    ) -> Persona:
        lineage = self.new_lineage() if lineage is None else lineage
        rows = await self.execute(
            "INSERT INTO personas (server_id, persona_lineage_id, nickname) VALUES (%s, %s, %s)"
            " RETURNING persona_id",
            server.server_id,
            lineage,
            nickname,
        )
        return Persona(rows[0]["persona_id"], server, lineage, nickname)

    async def user(
        self, disc_id: str | None = None, *, nickname: str | None = None, privacy_level: int = 0
    ) -> tuple[int, str]:
        """A `users` row: (user_id, user_disc_id)."""
        disc_id = disc_id or snowflake()
        rows = await self.execute(
            "INSERT INTO users (user_disc_id, user_nickname, privacy_level) VALUES (%s, %s, %s)"
            " RETURNING user_id",
            disc_id,
            nickname,
            privacy_level,
        )
        return rows[0]["user_id"], disc_id

    async def member(
        self,
        server: Server,
        disc_id: str,
        username: str,
        *,
        display_name: str | None = None,
        global_name: str | None = None,
        is_bot: bool = False,
    ) -> None:
        await self.execute(
            "INSERT INTO guild_members (server_id, user_disc_id, display_name, global_name,"
            " username, is_bot) VALUES (%s, %s, %s, %s, %s, %s)",
            server.server_id,
            disc_id,
            display_name,
            global_name,
            username,
            is_bot,
        )

    async def blacklist(self, server: Server, user_id: int) -> None:
        await self.execute(
            "INSERT INTO personalization_blacklist (server_id, user_id) VALUES (%s, %s)",
            server.server_id,
            user_id,
        )

    async def server_memory(
        self, persona: Persona, content: str, *, lineage: int | None = None
    ) -> int:
        rows = await self.execute(
            "INSERT INTO server_memories (server_id, persona_id, persona_lineage_id, content)"
            " VALUES (%s, %s, %s, %s) RETURNING server_memory_id",
            persona.server.server_id,
            persona.persona_id,
            persona.lineage if lineage is None else lineage,
            content,
        )
        return int(rows[0]["server_memory_id"])

    async def server_memory_of_lineage(self, server: Server, lineage: int, content: str) -> int:
        """A server memory of no persona here, under `lineage`: one a persona of another
        lineage must not reach."""
        rows = await self.execute(
            "INSERT INTO server_memories (server_id, persona_id, persona_lineage_id, content)"
            " VALUES (%s, NULL, %s, %s) RETURNING server_memory_id",
            server.server_id,
            lineage,
            content,
        )
        return int(rows[0]["server_memory_id"])

    async def personal_memory(self, user_id: int, lineage: int, content: str) -> int:
        rows = await self.execute(
            "INSERT INTO personal_memories (user_id, persona_lineage_id, content)"
            " VALUES (%s, %s, %s) RETURNING personal_memory_id",
            user_id,
            lineage,
            content,
        )
        return int(rows[0]["personal_memory_id"])

    async def memory(self, memory_id: int) -> dict[str, Any] | None:
        """The memory's row in whichever table holds it, with a `scope` key; None if gone."""
        rows = await self.execute(
            "SELECT 'server_wide' AS scope, content, created_at, updated_at, tags,"
            " persona_lineage_id FROM server_memories WHERE server_memory_id = %s"
            " UNION ALL SELECT 'target_user', content, created_at, updated_at, tags,"
            " persona_lineage_id FROM personal_memories WHERE personal_memory_id = %s",
            memory_id,
            memory_id,
        )
        return rows[0] if rows else None

    async def content(self, memory_id: int) -> str | None:
        row = await self.memory(memory_id)
        return None if row is None else str(row["content"])

    async def revisions(self, memory_id: int) -> list[dict[str, Any]]:
        return await self.execute(
            "SELECT * FROM memory_revisions WHERE memory_id = %s ORDER BY revision_id", memory_id
        )

    async def revisions_of_call(self, tool_call_id: str) -> list[dict[str, Any]]:
        return await self.execute(
            "SELECT * FROM memory_revisions WHERE tool_call_id = %s ORDER BY revision_id",
            tool_call_id,
        )

    async def outbox_of_call(self, tool_call_id: str) -> list[dict[str, Any]]:
        return await self.execute(
            "SELECT * FROM outbox WHERE correlation_id = %s ORDER BY outbox_id", tool_call_id
        )

    async def inbox(self, tool_call_id: str) -> dict[str, Any] | None:
        rows = await self.execute(
            "SELECT * FROM tool_call_inbox WHERE tool_call_id = %s", tool_call_id
        )
        return rows[0] if rows else None


async def _rows(
    connection: psycopg.AsyncConnection[Any], sql: str, params: tuple[Any, ...]
) -> list[dict[str, Any]]:
    cursor = connection.cursor(row_factory=dict_row)
    await cursor.execute(sql, params)
    return await cursor.fetchall() if cursor.description else []
