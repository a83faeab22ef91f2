"""Who a call's names are resolved among: the guild's member directories, and a user's
`users` row with whether they are excluded from personalization in the server.
`PostgresMembers` implements `worker.ports.Members`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import psycopg

from infra.storage.engine import fetch_all, fetch_one, psycopg_sql
from worker.core.model import DirectoryMember, StoredUser

__all__ = ["PostgresMembers"]

_DIRECTORIES: Final = psycopg_sql(
    """
    SELECT m.server_id, m.user_disc_id, m.username, m.display_name, m.global_name,
           u.user_nickname, m.is_bot
    FROM guild_members AS m
    LEFT JOIN users AS u ON u.user_disc_id = m.user_disc_id
    WHERE m.server_id = ANY(:server_ids)
    ORDER BY m.server_id, m.user_disc_id
    """
)

_USER: Final = psycopg_sql(
    """
    SELECT u.user_id, u.user_disc_id, u.privacy_level,
           EXISTS (
               SELECT 1 FROM personalization_blacklist AS b
               WHERE b.server_id = :server_id AND b.user_id = u.user_id
           ) AS blacklisted_here
    FROM users AS u WHERE u.user_disc_id = :user_disc_id
    """
)


class PostgresMembers:
    """The member directories and users, read on a batch's cursor."""

    __slots__ = ("_cursor",)

    def __init__(self, cursor: psycopg.AsyncCursor[Any]) -> None:
        self._cursor = cursor

    async def load_directory(self, server_id: int) -> list[DirectoryMember]:
        """The server's current members."""
        return (await self.load_directories([server_id]))[server_id]

    async def load_directories(self, server_ids: Sequence[int]) -> dict[int, list[DirectoryMember]]:
        """The current members of each server, in one statement."""
        directories: dict[int, list[DirectoryMember]] = {server_id: [] for server_id in server_ids}
        for row in await fetch_all(self._cursor, _DIRECTORIES, {"server_ids": list(server_ids)}):
            directories[row.server_id].append(
                DirectoryMember(
                    user_disc_id=row.user_disc_id,
                    username=row.username,
                    display_name=row.display_name,
                    global_name=row.global_name,
                    user_nickname=row.user_nickname,
                    is_bot=row.is_bot,
                )
            )
        return directories

    async def load_user(self, user_disc_id: str, *, server_id: int) -> StoredUser | None:
        """The user's `users` row, and whether they are excluded in the server."""
        row = await fetch_one(self._cursor, _USER, user_disc_id=user_disc_id, server_id=server_id)
        if row is None:
            return None
        return StoredUser(
            user_id=row.user_id,
            user_disc_id=row.user_disc_id,
            privacy_level=row.privacy_level,
            blacklisted_here=row.blacklisted_here,
        )
