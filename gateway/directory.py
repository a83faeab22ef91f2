"""Member directory upkeep: hikari member events keep `guild_members` current.

Decision: the gateway writes `guild_members` itself, with idempotent upserts and deletes
(SQLAlchemy 2 Core, async, psycopg 3), instead of sending member events to the worker. The
bot already shares the database with the worker; a row keyed by (server, user) makes an
upsert naturally idempotent, so a replayed or reordered-by-retry event cannot corrupt the
table, and no extra message type, queue or consumer is needed. The server row is created
when missing (`servers.server_disc_id` = the guild id).

What each event does:
- `MemberCreateEvent` / `MemberUpdateEvent`: upsert the member.
- `MemberDeleteEvent`: delete the row (only current members are listed).
- `MemberChunkEvent`: upsert every member of the chunk. When the chunks answer a request for
  the whole member list made through `MemberDirectory.request_all_members` (its nonce is
  remembered), the members the complete set does not name are deleted too, which catches
  departures the bot missed while it was offline.

Rows: `display_name` is the guild nickname (None without one), `global_name` the user's
global name, `username` the account name, `is_bot` whether the account is a bot.

Events of one guild are written one at a time, in the order hikari dispatched them, so that
a leave that follows an update is not undone by it. Chunks are a snapshot taken when they
were requested, so they can be older than live events: a chunk does not bring back a member
whose leave was seen in the last `recent_window_s` seconds, and a prune keeps members whose
join or update was seen while the chunks were arriving. Listening needs the privileged
`GUILD_MEMBERS` intent.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

import hikari
from sqlalchemy import (
    Boolean,
    Column,
    Integer,
    MetaData,
    Table,
    Text,
    and_,
    delete,
    select,
)
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from gateway.caches import TTLCache
from gateway.database import open_engine
from infra.observability.logs import get_logger
from infra.settings import Settings

__all__ = ["MemberDirectory", "MemberRow", "attach_directory", "detach_directory", "member_row"]

log = get_logger(__name__)

_metadata = MetaData()

servers = Table(
    "servers",
    _metadata,
    Column("server_id", Integer, primary_key=True),
    Column("server_disc_id", Text, nullable=False, unique=True),
)

guild_members = Table(
    "guild_members",
    _metadata,
    Column("server_id", Integer, primary_key=True),
    Column("user_disc_id", Text, primary_key=True),
    Column("display_name", Text, nullable=True),
    Column("global_name", Text, nullable=True),
    Column("username", Text, nullable=False),
    Column("is_bot", Boolean, nullable=False),
)

# One statement carries at most this many rows (a chunk has up to 1000 members).
_BATCH = 500


@dataclass(frozen=True, slots=True)
class MemberRow:
    """One `guild_members` row, without the server id."""

    user_disc_id: str
    display_name: str | None
    global_name: str | None
    username: str
    is_bot: bool


def member_row(member: hikari.Member) -> MemberRow:
    user = member.user
    return MemberRow(
        user_disc_id=str(int(user.id)),
        display_name=member.nickname or None,
        global_name=user.global_name,
        username=user.username,
        is_bot=user.is_bot,
    )


@dataclass
class _ChunkSet:
    """The chunks of one whole-member-list request, as they arrive."""

    chunk_count: int | None = None
    indexes: set[int] = field(default_factory=set)
    user_ids: set[str] = field(default_factory=set)
    seen_live: set[str] = field(default_factory=set)


class MemberDirectory:
    """Writes `guild_members` (and the `servers` row it needs)."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        owns_engine: bool = False,
        recent_window_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._engine = engine
        self._owns_engine = owns_engine
        self._server_ids: dict[str, int] = {}
        self._guild_locks: dict[str, asyncio.Lock] = {}
        self._full_requests: dict[tuple[str, str], _ChunkSet] = {}
        self._recent_leaves: TTLCache[tuple[str, str], bool] = TTLCache(
            recent_window_s, max_size=100_000, clock=clock
        )

    @classmethod
    def from_settings(cls, settings: Settings, *, pool_size: int = 2) -> MemberDirectory:
        return cls(open_engine(settings, pool_size=pool_size), owns_engine=True)

    async def close(self) -> None:
        if self._owns_engine:
            await self._engine.dispose()

    def _lock(self, guild_id: str) -> asyncio.Lock:
        lock = self._guild_locks.get(guild_id)
        if lock is None:
            lock = self._guild_locks[guild_id] = asyncio.Lock()
        return lock

    async def _server_id(self, connection: AsyncConnection, guild_id: str) -> int:
        cached = self._server_ids.get(guild_id)
        if cached is not None:
            return cached
        await connection.execute(
            insert(servers).values(server_disc_id=guild_id).on_conflict_do_nothing()
        )
        server_id = (
            await connection.execute(
                select(servers.c.server_id).where(servers.c.server_disc_id == guild_id)
            )
        ).scalar_one()
        self._server_ids[guild_id] = server_id
        return int(server_id)

    async def upsert_members(
        self, guild_id: hikari.Snowflakeish, members: Iterable[hikari.Member]
    ) -> int:
        """Inserts or refreshes the members' rows; returns how many rows were written."""
        guild = str(int(guild_id))
        # The last row of a user wins.
        rows = list({row.user_disc_id: row for row in map(member_row, members)}.values())
        if not rows:
            return 0
        async with self._lock(guild):
            try:
                return await self._upsert(guild, rows)
            except IntegrityError:
                # The cached server row was deleted meanwhile: look it up (or create it) again.
                if self._server_ids.pop(guild, None) is None:
                    raise
                return await self._upsert(guild, rows)

    async def _upsert(self, guild: str, rows: list[MemberRow]) -> int:
        async with self._engine.begin() as connection:
            server_id = await self._server_id(connection, guild)
            for start in range(0, len(rows), _BATCH):
                batch = rows[start : start + _BATCH]
                statement = insert(guild_members).values(
                    [{"server_id": server_id, **asdict(row)} for row in batch]
                )
                excluded = statement.excluded
                await connection.execute(
                    statement.on_conflict_do_update(
                        index_elements=[guild_members.c.server_id, guild_members.c.user_disc_id],
                        set_={
                            "display_name": excluded.display_name,
                            "global_name": excluded.global_name,
                            "username": excluded.username,
                            "is_bot": excluded.is_bot,
                        },
                    )
                )
        log.debug("directory.upserted", guild_id=guild, count=len(rows))
        return len(rows)

    async def upsert_member(self, member: hikari.Member) -> None:
        """A live join or update: also cancels a recent leave, and protects it from a prune."""
        guild, user = str(int(member.guild_id)), str(int(member.user.id))
        self._recent_leaves.invalidate((guild, user))
        for (pending_guild, _), chunk_set in self._full_requests.items():
            if pending_guild == guild:
                chunk_set.seen_live.add(user)
        await self.upsert_members(member.guild_id, (member,))

    async def remove_member(
        self, guild_id: hikari.Snowflakeish, user_id: hikari.Snowflakeish
    ) -> bool:
        """Deletes the member's row; True when there was one."""
        guild, user = str(int(guild_id)), str(int(user_id))
        self._recent_leaves.set((guild, user), True)
        async with self._lock(guild), self._engine.begin() as connection:
            result = await connection.execute(
                delete(guild_members).where(
                    and_(
                        guild_members.c.server_id
                        == select(servers.c.server_id)
                        .where(servers.c.server_disc_id == guild)
                        .scalar_subquery(),
                        guild_members.c.user_disc_id == user,
                    )
                )
            )
        removed = bool(result.rowcount)
        log.debug("directory.removed", guild_id=guild, user_id=user, removed=removed)
        return removed

    async def keep_only(self, guild_id: hikari.Snowflakeish, user_ids: Iterable[str]) -> int:
        """Deletes the guild's rows of every user not in `user_ids`; returns how many."""
        guild = str(int(guild_id))
        keep = sorted(set(user_ids))
        async with self._lock(guild), self._engine.begin() as connection:
            server_id = await self._server_id(connection, guild)
            result = await connection.execute(
                delete(guild_members).where(
                    and_(
                        guild_members.c.server_id == server_id,
                        guild_members.c.user_disc_id.not_in(keep),
                    )
                )
            )
        removed = int(result.rowcount or 0)
        log.info("directory.pruned", guild_id=guild, kept=len(keep), removed=removed)
        return removed

    def expect_full_member_list(self, guild_id: hikari.Snowflakeish, nonce: str) -> None:
        """Marks the chunks carrying `nonce` as the guild's whole member list."""
        self._full_requests[(str(int(guild_id)), nonce)] = _ChunkSet()

    async def request_all_members(
        self, bot: hikari.GatewayBot, guild: hikari.SnowflakeishOr[hikari.PartialGuild]
    ) -> str:
        """Asks Discord for the guild's whole member list; the chunks then also prune."""
        nonce = secrets.token_hex(8)
        self.expect_full_member_list(int(guild), nonce)
        await bot.request_guild_members(guild, query="", limit=0, nonce=nonce)
        return nonce

    # Event handlers (`attach_directory` subscribes them). A failed write is logged with the
    # guild and user; the next event or chunk for that member writes the row again.

    async def on_member_create(self, event: hikari.MemberCreateEvent) -> None:
        with _logged("member_create", event.guild_id, event.user_id):
            await self.upsert_member(event.member)

    async def on_member_update(self, event: hikari.MemberUpdateEvent) -> None:
        with _logged("member_update", event.guild_id, event.user_id):
            await self.upsert_member(event.member)

    async def on_member_delete(self, event: hikari.MemberDeleteEvent) -> None:
        with _logged("member_delete", event.guild_id, event.user_id):
            await self.remove_member(event.guild_id, event.user_id)

    async def on_member_chunk(self, event: hikari.MemberChunkEvent) -> None:
        with _logged("member_chunk", event.guild_id, None):
            await self._apply_chunk(event)

    async def _apply_chunk(self, event: hikari.MemberChunkEvent) -> None:
        guild = str(int(event.guild_id))
        members = [
            member
            for user_id, member in event.members.items()
            if self._recent_leaves.get((guild, str(int(user_id)))) is None
        ]
        await self.upsert_members(event.guild_id, members)
        key = (guild, event.nonce or "")
        chunk_set = self._full_requests.get(key)
        if chunk_set is None:
            return
        # Only chunks written above count: a failed one leaves the set incomplete (no prune).
        chunk_set.chunk_count = event.chunk_count
        chunk_set.indexes.add(event.chunk_index)
        chunk_set.user_ids.update(str(int(member.user.id)) for member in members)
        if len(chunk_set.indexes) >= event.chunk_count:
            del self._full_requests[key]
            await self.keep_only(event.guild_id, chunk_set.user_ids | chunk_set.seen_live)


@contextmanager
def _logged(
    what: str, guild_id: hikari.Snowflakeish, user_id: hikari.Snowflakeish | None
) -> Iterator[None]:
    try:
        yield
    except Exception:
        log.exception(
            "directory.write_failed",
            member_event=what,
            guild_id=str(int(guild_id)),
            user_id=None if user_id is None else str(int(user_id)),
        )


def attach_directory(bot: hikari.GatewayBot, directory: MemberDirectory) -> None:
    """Subscribes the directory to the bot's member events."""
    bot.subscribe(hikari.MemberCreateEvent, directory.on_member_create)
    bot.subscribe(hikari.MemberUpdateEvent, directory.on_member_update)
    bot.subscribe(hikari.MemberDeleteEvent, directory.on_member_delete)
    bot.subscribe(hikari.MemberChunkEvent, directory.on_member_chunk)


def detach_directory(bot: hikari.GatewayBot, directory: MemberDirectory) -> None:
    bot.unsubscribe(hikari.MemberCreateEvent, directory.on_member_create)
    bot.unsubscribe(hikari.MemberUpdateEvent, directory.on_member_update)
    bot.unsubscribe(hikari.MemberDeleteEvent, directory.on_member_delete)
    bot.unsubscribe(hikari.MemberChunkEvent, directory.on_member_chunk)
