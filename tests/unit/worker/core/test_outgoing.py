"""The events of a change of a memory: which, in what order, where they go and for how long."""

from __future__ import annotations

import uuid

import pytest

from contracts import (
    CacheInvalidate,
    EmbedPayload,
    EmbedRequested,
    MemoryChanged,
    MemoryRestored,
    MemoryScope,
    MemoryStatus,
    MemoryUpdated,
    ResultData,
    ToolCallCompleted,
)
from tests.unit.worker.given import ALICE_ID, CHANNEL_ID, GUILD_ID, TRIGGERER_ID
from worker.core.outgoing import change_events, result_event

CAUSE = uuid.uuid4()
REPLY_TTL_MS = 30_000


def _result() -> ToolCallCompleted:
    return ToolCallCompleted(
        causation_id=CAUSE,
        tool_call_id="call_1",
        tool_name="update_long_term_memory",
        guild_id=GUILD_ID,
        channel_id=CHANNEL_ID,
        shard_id=3,
        success=True,
        status=MemoryStatus.UPDATED,
        message="updated",
        data=ResultData(),
    )


def _embed() -> EmbedRequested:
    return EmbedRequested(
        causation_id=CAUSE,
        tool_call_id="call_1",
        guild_id=GUILD_ID,
        channel_id=CHANNEL_ID,
        shard_id=3,
        kind="memory_updated",
        embed=EmbedPayload(title="Memory updated", description="likes tea", color=1),
    )


def _change(
    scope: MemoryScope,
    owner_id: str | None,
    audit_type: type[MemoryUpdated | MemoryRestored] = MemoryUpdated,
) -> MemoryChanged:
    return audit_type(
        causation_id=CAUSE if audit_type is MemoryUpdated else None,
        tool_call_id="call_1",
        revision_id=5,
        scope=scope,
        memory_id=24,
        guild_id=GUILD_ID,
        channel_id=CHANNEL_ID,
        owner_id=owner_id,
        actor_id=TRIGGERER_ID,
        persona_id=7,
        persona_lineage_id=42,
    )


def test_a_result_goes_to_its_shard_while_the_bot_may_wait() -> None:
    result = _result()
    outgoing = result_event(result, REPLY_TTL_MS)
    assert (outgoing.event, outgoing.routing_key, outgoing.ttl_ms) == (
        result,
        "result.shard.3",
        REPLY_TTL_MS,
    )


@pytest.mark.parametrize(
    ("scope", "owner_id", "cache_key"),
    [
        ("server_wide", None, f"cache.persona_state.{GUILD_ID}"),
        ("target_user", ALICE_ID, f"cache.user.{ALICE_ID}"),
    ],
)
def test_a_tool_calls_change_answers_then_invalidates_then_audits(
    scope: MemoryScope, owner_id: str | None, cache_key: str
) -> None:
    result, embed, change = _result(), _embed(), _change(scope, owner_id)
    events = change_events(
        change, server_disc_id=GUILD_ID, answered=(result, embed), reply_ttl_ms=REPLY_TTL_MS
    )
    assert [(e.routing_key, e.ttl_ms) for e in events] == [
        ("result.shard.3", REPLY_TTL_MS),
        ("embed.shard.3", REPLY_TTL_MS),
        (cache_key, None),
        (f"memory.updated.{scope}", None),
    ]
    assert events[0].event is result and events[1].event is embed and events[3].event is change
    invalidation = events[2].event
    assert isinstance(invalidation, CacheInvalidate)
    assert invalidation.causation_id == CAUSE and invalidation.tool_call_id == "call_1"


def test_a_restore_audits_then_invalidates() -> None:
    change = _change("target_user", ALICE_ID, MemoryRestored)
    events = change_events(change, server_disc_id=GUILD_ID)
    assert [(e.routing_key, e.ttl_ms) for e in events] == [
        ("memory.restored.target_user", None),
        (f"cache.user.{ALICE_ID}", None),
    ]
    invalidation = events[1].event
    assert isinstance(invalidation, CacheInvalidate)
    assert invalidation.causation_id is None and invalidation.tool_call_id == "call_1"


def test_no_invalidation_without_the_key_of_the_cache() -> None:
    change = _change("server_wide", None, MemoryRestored)
    assert [e.routing_key for e in change_events(change, server_disc_id=None)] == [
        "memory.restored.server_wide"
    ]
