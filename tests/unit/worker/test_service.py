"""The order of the pipeline's steps: the real `process_tool_call`, the database's answers
given (docs/behaviour.md, update steps: the first step that fails decides the result)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import JsonValue

from contracts import (
    UPDATE_LONG_TERM_MEMORY,
    MemoryStatus,
    Participant,
    ResultData,
    ToolCallRequested,
)
from tests.unit.worker.fakes import GivenFacts
from tests.unit.worker.given import ALICE_ID, ALICE_ROW, BOT_ID, MATRIX_ID, context, state
from worker.core.model import DirectoryMember, ServerState, StaleWrite, StoredUser
from worker.core.records import StoredResult
from worker.service import process_tool_call, process_tool_calls

DIRECTORY = (
    DirectoryMember(ALICE_ID, "alice", "Alice"),
    DirectoryMember("100000000000000003", "alex1", "Alex"),
    DirectoryMember("100000000000000004", "alex2", "Alex"),
    DirectoryMember(BOT_ID, "tomori", "Tomori", is_bot=True),
    DirectoryMember("100000000000000005", "private", "Private"),
)
USERS = {
    ALICE_ID: ALICE_ROW,
    "100000000000000005": StoredUser(
        user_id=13, user_disc_id="100000000000000005", privacy_level=1
    ),
}


async def decide(
    arguments: JsonValue,
    *,
    server_state: ServerState | None = None,
    row_exists: bool = True,
    in_other_scope: bool = False,
    forbidden: bool = False,
    stale: StaleWrite | None = None,
) -> MemoryStatus:
    """What the pipeline answers a call with these arguments, given these facts."""
    request = ToolCallRequested(
        tool_call_id="call_1",
        tool_name=UPDATE_LONG_TERM_MEMORY,
        arguments=arguments,
        context=context(participants=[Participant(user_id=MATRIX_ID, display_label="bridge")]),
    )
    facts = GivenFacts(
        state() if server_state is None else server_state,
        directory=DIRECTORY,
        users=USERS,
        row_exists=row_exists,
        in_other_scope=in_other_scope,
        forbidden=forbidden,
        stale=stale,
    )
    processed = await process_tool_call(request, facts, max_memory_length=1000, reply_ttl_ms=1)
    return processed.result.status


def call(memory_id: JsonValue = 24, content: str = "x", target: str | None = None) -> JsonValue:
    arguments: dict[str, JsonValue] = {"memory_id": memory_id, "memory_content": content}
    return arguments if target is None else {**arguments, "target_user": target}


STALE = StaleWrite(current_revision_id=9, current_content="now")
OFF = {"server_state": state(self_teaching_enabled=False)}
LONG = "x" * 1001


@pytest.mark.parametrize(
    ("arguments", "facts", "status"),
    [
        (call(), {}, MemoryStatus.UPDATED),
        (call(24.0, "  "), {}, MemoryStatus.DELETED),
        (call(target="alice"), {}, MemoryStatus.UPDATED),
        (call(content="", target="Private"), {}, MemoryStatus.DELETED),
        (call("24"), {}, MemoryStatus.INVALID_ARGS),
        (call(True), {}, MemoryStatus.INVALID_ARGS),
        (call(2**53), {}, MemoryStatus.INVALID_ARGS),
        (call(), {"server_state": state(persona_server_id=9)}, MemoryStatus.INTERNAL_ERROR),
        (call(), OFF, MemoryStatus.DISABLED),
        # Arguments come before the flag, the flag before the content.
        (call(0), OFF, MemoryStatus.INVALID_ARGS),
        (call(content=LONG), OFF, MemoryStatus.DISABLED),
        (call(content=LONG), {}, MemoryStatus.INVALID_CONTENT),
        # The content comes before the target user.
        (call(content=LONG, target="nobody"), {}, MemoryStatus.INVALID_CONTENT),
        # Blank deletes; text that shows nothing is no memory, and no delete either.
        (call(content="\u200b", target="nobody"), {}, MemoryStatus.INVALID_CONTENT),
        (call(content=" \u200b ", target="Private"), {}, MemoryStatus.INVALID_CONTENT),
        (call(target="alex"), {}, MemoryStatus.AMBIGUOUS_USER),
        (call(target="nobody"), {}, MemoryStatus.USER_NOT_FOUND),
        # Resolved, but never stored in `users`.
        (call(target="Alex (@alex2)"), {}, MemoryStatus.USER_NOT_FOUND),
        (call(target=MATRIX_ID), {}, MemoryStatus.INVALID_SCOPE),
        (call(target=f"<@{BOT_ID}>"), {}, MemoryStatus.INVALID_TARGET),
        (call(target="Private"), {}, MemoryStatus.PRIVACY_RESTRICTED),
        (call(), {"row_exists": False}, MemoryStatus.NOT_FOUND),
        (call(target="  "), {"row_exists": False, "in_other_scope": True}, MemoryStatus.NOT_FOUND),
        # The edit policy is checked by the write, after every step before it.
        (call(), {"forbidden": True}, MemoryStatus.FORBIDDEN),
        (call(content="", target="alice"), {"forbidden": True}, MemoryStatus.FORBIDDEN),
        (call(target="Private"), {"forbidden": True}, MemoryStatus.PRIVACY_RESTRICTED),
        (call(), {**OFF, "forbidden": True}, MemoryStatus.DISABLED),
        # A memory changed since the LLM was shown it: decided by the write, after the policy.
        (call(), {"stale": STALE}, MemoryStatus.CONFLICT),
        (call(content="", target="alice"), {"stale": STALE}, MemoryStatus.CONFLICT),
        (call(), {"stale": STALE, "forbidden": True}, MemoryStatus.FORBIDDEN),
        (call(target="Private"), {"stale": STALE}, MemoryStatus.PRIVACY_RESTRICTED),
    ],
)
async def test_the_first_failing_step_decides(
    arguments: JsonValue, facts: dict[str, Any], status: MemoryStatus
) -> None:
    assert await decide(arguments, **facts) is status


async def test_a_decided_call_is_recorded_with_its_events_result_first() -> None:
    facts = GivenFacts(state(), directory=DIRECTORY, users=USERS)
    request = ToolCallRequested(
        tool_call_id="call_1",
        tool_name=UPDATE_LONG_TERM_MEMORY,
        arguments=call(),
        context=context(),
    )
    [processed] = await process_tool_calls([request], facts, max_memory_length=1000, reply_ttl_ms=1)

    assert processed.written
    assert [planned.write.memory_id for planned in facts.applied] == [24]
    assert [(a.tool_call_id, a.status) for a in facts.results] == [("call_1", MemoryStatus.UPDATED)]
    assert facts.queued[0].event == processed.result
    assert [row.event_id for row in processed.outbox] == [o.event.event_id for o in facts.queued]


async def test_a_call_with_a_record_is_answered_from_it_and_writes_nothing() -> None:
    stored = StoredResult(
        status=MemoryStatus.NOT_FOUND,
        message="earlier",
        data=ResultData(),
        tool_name=UPDATE_LONG_TERM_MEMORY,
        guild_id=None,
        channel_id="900000000000000011",
        shard_id=3,
        fingerprint=None,
    )
    facts = GivenFacts(state(), answered={"call_1": stored})
    request = ToolCallRequested(
        tool_call_id="call_1",
        tool_name=UPDATE_LONG_TERM_MEMORY,
        arguments=call(),
        context=context(),
    )
    [processed] = await process_tool_calls([request], facts, max_memory_length=1000, reply_ttl_ms=1)

    assert processed.replayed and not processed.written
    assert (processed.result.status, processed.result.message) == (
        MemoryStatus.NOT_FOUND,
        "earlier",
    )
    assert (processed.result.channel_id, processed.result.shard_id) == ("900000000000000011", 3)
    assert facts.applied == [] and facts.results == [] and processed.outbox == []


async def test_a_stale_write_is_answered_with_the_result_alone() -> None:
    facts = GivenFacts(state(), directory=DIRECTORY, users=USERS, stale=STALE)
    request = ToolCallRequested(
        tool_call_id="call_1",
        tool_name=UPDATE_LONG_TERM_MEMORY,
        arguments=call(),
        context=context(seen={"24": 3}),
    )
    [processed] = await process_tool_calls([request], facts, max_memory_length=1000, reply_ttl_ms=1)

    assert processed.written  # recorded, for a redelivery to repeat
    assert [planned.write.seen_revision_id for planned in facts.applied] == [3]
    assert processed.result.status is MemoryStatus.CONFLICT
    assert (processed.result.data.current_revision_id, processed.result.data.current_content) == (
        9,
        "now",
    )
    assert [queued.event for queued in facts.queued] == [processed.result]
