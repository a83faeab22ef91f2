"""Running one tool call through the pipeline, and what the database must hold afterwards."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from contracts import (
    CREATE_COLOR,
    CREATE_LONG_TERM_MEMORY,
    DELETE_COLOR,
    UPDATE_COLOR,
    UPDATE_LONG_TERM_MEMORY,
    CacheInvalidate,
    EmbedRequested,
    MemoryChanged,
    MemoryStatus,
    Participant,
    ToolCallCompleted,
    ToolCallRequested,
    decode_event,
)
from harness.world import Persona, Server, World, participant, tool_call
from worker.adapters.memory_store import MemoryStore
from worker.service import Processed, process_tool_calls
from worker.tools.base import DEFAULT_MEMORY_LIMIT

__all__ = [
    "MAX_MEMORY_LENGTH",
    "REPLY_TTL_MS",
    "SHARD",
    "Pipeline",
    "Scene",
    "assert_failure",
    "assert_only_content_changed",
    "assert_result",
    "assert_success_events",
    "single_revision",
]

MAX_MEMORY_LENGTH = 1000
REPLY_TTL_MS = 900_000
SHARD = 2  # not the default 0, so that routing by the call's shard shows
TRIGGERER_NAME = "Trig"

Action = Literal["created", "updated", "deleted"]
EMBED_COLORS: Final = {"created": CREATE_COLOR, "updated": UPDATE_COLOR, "deleted": DELETE_COLOR}
Scope = Literal["server_wide", "target_user"]


@dataclass(frozen=True)
class Scene:
    """A server (a guild, or a DM keyed by the triggerer's id), its persona and the triggerer.

    The triggerer has a `users` row (the teacher of seeded server memories) and, in a guild,
    is a current member.
    """

    server: Server
    persona: Persona
    triggerer: str
    triggerer_user_id: int

    def call(
        self,
        arguments: Any,
        *participants: Participant,
        tool_call_id: str | None = None,
        persona_id: int | None = None,
        shard_id: int = SHARD,
        tool_name: str = UPDATE_LONG_TERM_MEMORY,
        triggerer_is_manager: bool = False,
    ) -> ToolCallRequested:
        """A call of the triggerer; the participants are the triggerer and those given."""
        return tool_call(
            self.persona,
            arguments,
            triggerer_id=self.triggerer,
            participants=(participant(self.triggerer, TRIGGERER_NAME), *participants),
            tool_call_id=tool_call_id,
            persona_id=persona_id,
            shard_id=shard_id,
            tool_name=tool_name,
            triggerer_is_manager=triggerer_is_manager,
        )

    def create(
        self,
        arguments: Any,
        *participants: Participant,
        tool_name: str = CREATE_LONG_TERM_MEMORY,
        **options: Any,
    ) -> ToolCallRequested:
        """A create_long_term_memory call of the triggerer (or under the tool's old name)."""
        return self.call(arguments, *participants, tool_name=tool_name, **options)


@dataclass
class Pipeline:
    """The real adapter on the test database, and the extra seeding and reading tests need."""

    store: MemoryStore
    world: World

    async def run(
        self,
        call: ToolCallRequested,
        *,
        max_memory_length: int = MAX_MEMORY_LENGTH,
        store: MemoryStore | None = None,
        max_server_memories: int = DEFAULT_MEMORY_LIMIT,
        max_personal_memories: int = DEFAULT_MEMORY_LIMIT,
    ) -> Processed:
        """One call in one transaction, committed when the block ends, as the worker does."""
        [processed] = await self.run_together(
            [call],
            max_memory_length=max_memory_length,
            store=store,
            max_server_memories=max_server_memories,
            max_personal_memories=max_personal_memories,
        )
        return processed

    async def run_together(
        self,
        calls: Sequence[ToolCallRequested],
        *,
        max_memory_length: int = MAX_MEMORY_LENGTH,
        store: MemoryStore | None = None,
        max_server_memories: int = DEFAULT_MEMORY_LIMIT,
        max_personal_memories: int = DEFAULT_MEMORY_LIMIT,
    ) -> list[Processed]:
        """Calls in one transaction (one batch of the worker), committed when it ends."""
        async with (store or self.store).transaction() as tx:
            return await process_tool_calls(
                calls,
                tx,
                max_memory_length=max_memory_length,
                reply_ttl_ms=REPLY_TTL_MS,
                max_server_memories=max_server_memories,
                max_personal_memories=max_personal_memories,
            )

    async def guild(
        self,
        *,
        self_teaching_enabled: bool | None = None,
        personal_memories_enabled: bool | None = None,
    ) -> Scene:
        server = await self.world.server(
            self_teaching_enabled=self_teaching_enabled,
            personal_memories_enabled=personal_memories_enabled,
        )
        persona = await self.world.persona(server)
        user_id, disc_id = await self.world.user()
        await self.world.member(server, disc_id, "trig_user", display_name=TRIGGERER_NAME)
        return Scene(server, persona, disc_id, user_id)

    async def dm(self, *, self_teaching_enabled: bool | None = None) -> Scene:
        user_id, disc_id = await self.world.user()
        server = await self.world.server(
            disc_id=disc_id, is_dm=True, self_teaching_enabled=self_teaching_enabled
        )
        persona = await self.world.persona(server)
        return Scene(server, persona, disc_id, user_id)

    async def sql(self, query: str, *params: Any) -> list[dict[str, Any]]:
        """Plain SQL on the test database, outside any transaction of the pipeline."""
        return await self.world.execute(query, *params)

    async def server_memory(
        self,
        persona: Persona,
        content: str,
        *,
        teacher: int | None = None,
        tags: tuple[str, ...] = ("likes", "food"),
        lineage: int | None = None,
    ) -> int:
        """A server memory an hour old, with a teacher and tags an update must keep."""
        memory_id = await self.world.server_memory(persona, content, lineage=lineage)
        await self.sql(
            "UPDATE server_memories SET user_id = %s, tags = %s,"
            " created_at = now() - interval '1 hour', updated_at = now() - interval '1 hour'"
            " WHERE server_memory_id = %s",
            teacher,
            list(tags),
            memory_id,
        )
        return memory_id

    async def personal_memory(
        self,
        owner_user_id: int,
        lineage: int,
        content: str,
        *,
        tags: tuple[str, ...] = ("pets",),
    ) -> int:
        """A personal memory an hour old, with tags an update must keep."""
        memory_id = await self.world.personal_memory(owner_user_id, lineage, content)
        await self.sql(
            "UPDATE personal_memories SET tags = %s,"
            " created_at = now() - interval '1 hour', updated_at = now() - interval '1 hour'"
            " WHERE personal_memory_id = %s",
            list(tags),
            memory_id,
        )
        return memory_id

    async def row(self, memory_id: int) -> dict[str, Any] | None:
        """Every column of the memory that an update may or may not change; None when gone."""
        rows = await self.sql(
            "SELECT 'server_wide' AS scope, content, created_at, updated_at, tags,"
            " persona_lineage_id, server_id, user_id AS teacher, NULL::integer AS owner"
            " FROM server_memories WHERE server_memory_id = %s"
            " UNION ALL"
            " SELECT 'target_user', content, created_at, updated_at, tags,"
            " persona_lineage_id, NULL::integer, NULL::integer, user_id"
            " FROM personal_memories WHERE personal_memory_id = %s",
            memory_id,
            memory_id,
        )
        assert len(rows) <= 1, rows
        return rows[0] if rows else None


def assert_result(
    processed: Processed,
    call: ToolCallRequested,
    status: MemoryStatus,
    data: dict[str, Any] | None = None,
) -> ToolCallCompleted:
    """The answer: its status, a message, its data (exactly, when given), and where it goes."""
    result = processed.result
    assert result.status is status, (result.status, result.message)
    assert result.success is status.success
    assert result.message.strip()
    assert result.tool_call_id == call.tool_call_id
    assert result.tool_name == call.tool_name
    assert result.guild_id == call.context.guild_id
    assert result.channel_id == call.context.channel_id
    assert result.shard_id == call.context.shard_id
    if data is not None:
        assert result.data.model_dump(mode="json") == data
    return result


def assert_only_content_changed(
    before: dict[str, Any] | None, after: dict[str, Any] | None, content: str
) -> None:
    """An update: the content and updated_at change, created_at, tags, teacher, owner do not."""
    assert before is not None
    assert after is not None
    assert after["content"] == content
    assert after["updated_at"] > before["updated_at"]
    for column in ("scope", "created_at", "tags", "teacher", "owner", "persona_lineage_id"):
        assert after[column] == before[column], column
    assert after["server_id"] == before["server_id"]


async def single_revision(
    world: World,
    call: ToolCallRequested,
    *,
    memory_id: int,
    scope: Scope,
    action: Action,
    before: str,
    after: str | None,
    server_id: int,
    owner_user_id: int | None,
    lineage: int,
) -> dict[str, Any]:
    """The one revision of the call, with every column docs/contract.md names."""
    revisions = await world.revisions_of_call(call.tool_call_id)
    assert len(revisions) == 1, revisions
    (revision,) = revisions
    expected = {
        "scope": scope,
        "memory_id": memory_id,
        "action": action,
        "content_before": before,
        "content_after": after,
        "server_id": server_id,
        "owner_user_id": owner_user_id,
        "persona_lineage_id": lineage,
        "actor_disc_id": call.context.triggerer_id,
        "tool_call_id": call.tool_call_id,
    }
    assert {key: revision[key] for key in expected} == expected
    assert revision["occurred_at"] is not None
    return revision


async def assert_success_events(
    world: World,
    processed: Processed,
    call: ToolCallRequested,
    *,
    revision: dict[str, Any],
    cache: Literal["persona_state", "user"],
    cache_key: str,
    owner_id: str | None = None,
) -> None:
    """Exactly result, embed, invalidation and audit event, queued unpublished in the outbox."""
    action: Action = revision["action"]
    scope: Scope = revision["scope"]
    shard = call.context.shard_id
    rows = await world.outbox_of_call(call.tool_call_id)
    assert [row["routing_key"] for row in rows] == [
        f"result.shard.{shard}",
        f"embed.shard.{shard}",
        f"cache.{cache}.{cache_key}",
        f"memory.{action}.{scope}",
    ]
    assert [row["event_type"] for row in rows] == [
        "tool_call.completed",
        "embed.requested",
        "cache.invalidate",
        f"memory.{action}",
    ]
    assert [row["ttl_ms"] for row in rows] == [REPLY_TTL_MS, REPLY_TTL_MS, None, None]
    assert all(row["published_at"] is None for row in rows)
    assert [row["event_id"] for row in rows] == [row.event_id for row in processed.outbox]

    result, embed, invalidation, audit = (decode_event(bytes(row["body"])) for row in rows)
    assert isinstance(result, ToolCallCompleted)
    assert result == processed.result

    assert isinstance(embed, EmbedRequested)
    assert embed.kind == f"memory_{action}"
    assert embed.embed.color == EMBED_COLORS[action]
    assert (embed.tool_call_id, embed.channel_id, embed.guild_id, embed.shard_id) == (
        call.tool_call_id,
        call.context.channel_id,
        call.context.guild_id,
        shard,
    )
    assert embed.embed.title
    assert embed.embed.total_length() <= 6000
    # The memory the notice is about: what the gateway records, for a later retraction.
    assert (embed.memory_id, embed.scope, embed.owner_disc_id) == (
        revision["memory_id"],
        scope,
        owner_id,
    )

    assert isinstance(invalidation, CacheInvalidate)
    assert (invalidation.cache, invalidation.key) == (cache, cache_key)

    assert isinstance(audit, MemoryChanged)
    assert audit.event_type == f"memory.{action}"
    assert audit.revision_id == revision["revision_id"]
    assert audit.scope == scope
    assert audit.memory_id == revision["memory_id"]
    # The texts stay in the revision the event names: the audit body holds none.
    assert audit.schema_version == 2
    assert not {"content_before", "content_after"} & set(json.loads(bytes(rows[3]["body"])))
    assert audit.persona_lineage_id == revision["persona_lineage_id"]
    assert audit.actor_id == call.context.triggerer_id
    assert audit.persona_id == call.context.persona_id
    assert audit.owner_id == owner_id
    assert (audit.guild_id, audit.channel_id) == (call.context.guild_id, call.context.channel_id)

    inbox = await world.inbox(call.tool_call_id)
    assert inbox is not None
    assert inbox["status"] == processed.result.status.value


async def assert_failure(
    world: World,
    processed: Processed,
    call: ToolCallRequested,
    status: MemoryStatus,
    data: dict[str, Any] | None = None,
) -> ToolCallCompleted:
    """A failure result: answered and recorded, only the result queued, no revision."""
    result = assert_result(processed, call, status, data)
    assert not processed.replayed
    rows = await world.outbox_of_call(call.tool_call_id)
    assert [(row["routing_key"], row["event_type"]) for row in rows] == [
        (f"result.shard.{call.context.shard_id}", "tool_call.completed")
    ]
    assert rows[0]["ttl_ms"] == REPLY_TTL_MS
    assert decode_event(bytes(rows[0]["body"])) == result
    assert [row.event_id for row in processed.outbox] == [rows[0]["event_id"]]
    assert await world.revisions_of_call(call.tool_call_id) == []
    inbox = await world.inbox(call.tool_call_id)
    assert inbox is not None
    assert inbox["status"] == status.value
    assert inbox["result"]["message"] == result.message
    return result
