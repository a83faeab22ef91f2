"""Memories with the columns reading back shows (creation time, tags, teacher), seeded."""

from __future__ import annotations

from datetime import datetime

from harness.world import World

__all__ = ["shape_memory"]


async def shape_memory(
    world: World,
    memory_id: int,
    *,
    created_at: datetime | None = None,
    tags: tuple[str, ...] | None = None,
    teacher_user_id: int | None = None,
) -> None:
    """Sets what is given on the memory's row, whichever table holds it (`updated_at` follows
    `created_at`, as for a memory never changed since; a teacher only on a server memory)."""
    for table, id_column in (
        ("server_memories", "server_memory_id"),
        ("personal_memories", "personal_memory_id"),
    ):
        if created_at is not None:
            await world.execute(
                f"UPDATE {table} SET created_at = %s, updated_at = %s WHERE {id_column} = %s",
                created_at,
                created_at,
                memory_id,
            )
        if tags is not None:
            await world.execute(
                f"UPDATE {table} SET tags = %s WHERE {id_column} = %s", list(tags), memory_id
            )
    if teacher_user_id is not None:
        await world.execute(
            "UPDATE server_memories SET user_id = %s WHERE server_memory_id = %s",
            teacher_user_id,
            memory_id,
        )
