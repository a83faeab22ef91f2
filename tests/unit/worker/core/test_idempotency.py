"""Whether a tool_call_id's idempotency record answers a call: the same call, or another one."""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

import pytest
from pydantic import JsonValue

from contracts import (
    UPDATE_LONG_TERM_MEMORY,
    MemoryStatus,
    Participant,
    ToolCallContext,
    ToolCallRequested,
)
from tests.unit.worker.given import CHANNEL_ID, GUILD_ID, TRIGGERER_ID, context
from worker.core.idempotency import (
    TOOL_CALL_ID_REUSED,
    call_fingerprint,
    check_same_call,
)
from worker.core.model import Rejection


def request(arguments: JsonValue = None, **changes: Any) -> ToolCallRequested:
    call = ToolCallRequested(
        tool_call_id="call_1",
        tool_name=UPDATE_LONG_TERM_MEMORY,
        arguments={"memory_id": 24, "memory_content": "likes tea"}
        if arguments is None
        else arguments,
        context=context(),
    )
    context_changes = {
        key: changes.pop(key) for key in list(changes) if key in ToolCallContext.model_fields
    }
    return call.model_copy(
        update={**changes, "context": call.context.model_copy(update=context_changes)}
    )


def test_the_fingerprint_is_the_sha256_of_a_canonical_json_of_the_call() -> None:
    # Pinned byte for byte: records outlive the process and the version that wrote them, so
    # the same call must give the same fingerprint in any process, on any later version.
    canonical = (
        '{"arguments":{"memory_content":"likes tea","memory_id":24},'
        f'"channel_id":"{CHANNEL_ID}","guild_id":"{GUILD_ID}","persona_id":"7",'
        f'"tool_name":"update_long_term_memory","triggerer_id":"{TRIGGERER_ID}"}}'
    )
    assert call_fingerprint(request()) == hashlib.sha256(canonical.encode()).hexdigest()


def test_text_is_canonical_as_escaped_ascii_and_a_dm_has_a_null_guild() -> None:
    call = request({"memory_content": "caf\u00e9 \U0001f600", "memory_id": 24}, guild_id=None)
    canonical = (
        '{"arguments":{"memory_content":"caf\\u00e9 \\ud83d\\ude00","memory_id":24},'
        f'"channel_id":"{CHANNEL_ID}","guild_id":null,"persona_id":"7",'
        f'"tool_name":"update_long_term_memory","triggerer_id":"{TRIGGERER_ID}"}}'
    )
    assert call_fingerprint(call) == hashlib.sha256(canonical.encode()).hexdigest()


def test_the_order_of_the_arguments_does_not_matter() -> None:
    ordered = request({"a": {"x": 1, "y": [1, 2]}, "b": 2})
    reordered = request({"b": 2, "a": {"y": [1, 2], "x": 1}})
    assert call_fingerprint(ordered) == call_fingerprint(reordered)


@pytest.mark.parametrize(
    "arguments",
    [
        {"memory_id": 10**30, "memory_content": "x"},  # beyond 64 bits
        {"memory_id": float("nan"), "memory_content": "x"},
        {"memory_id": float("inf"), "memory_content": "x"},
        [1, "two", None, True],
        "not an object",
        None,
    ],
    ids=repr,
)
def test_any_decoded_arguments_have_a_fingerprint(arguments: JsonValue) -> None:
    call = request().model_copy(update={"arguments": arguments})
    fingerprint = call_fingerprint(call)
    assert len(fingerprint) == 64 and int(fingerprint, 16) >= 0
    assert fingerprint == call_fingerprint(call.model_copy())


def test_what_a_redelivery_may_change_is_not_part_of_the_call() -> None:
    """A copy of the call from elsewhere: another event, shard, bot process or view of the
    conversation. docs/behaviour.md names what makes the call: tool, arguments, guild, channel,
    triggerer, persona."""
    first = request()
    copy = request(
        event_id=uuid.uuid4(),
        causation_id=uuid.uuid4(),
        shard_id=7,
        bot_user_id="100000000000000077",
        locale="de",
        participants=(Participant(user_id="100000000000000002", display_label="Alice"),),
    )
    assert call_fingerprint(copy) == call_fingerprint(first)


@pytest.mark.parametrize(
    "changes",
    [
        {"tool_name": "create_long_term_memory"},
        {"arguments": {"memory_id": 24, "memory_content": "likes coffee"}},
        {"arguments": {"memory_id": 25, "memory_content": "likes tea"}},
        {"arguments": {"memory_id": 24, "memory_content": "likes tea", "target_user": "Al"}},
        {"arguments": {"memory_id": 24.0, "memory_content": "likes tea"}},  # as received
        {"guild_id": "900000000000000002"},
        {"guild_id": None},
        {"channel_id": "900000000000000011"},
        {"triggerer_id": "100000000000000003"},
        {"persona_id": 8},
    ],
    ids=lambda changes: next(iter(changes)),
)
def test_each_part_of_the_call_changes_the_fingerprint(changes: dict[str, Any]) -> None:
    arguments = changes.pop("arguments", None)
    assert call_fingerprint(request(arguments, **changes)) != call_fingerprint(request())


def test_the_same_call_is_answered_from_the_record() -> None:
    call = request()
    assert (
        check_same_call(
            call, recorded=call_fingerprint(call), invalid_args=MemoryStatus.INVALID_ARGS
        )
        is None
    )


def test_a_record_from_before_fingerprints_answers_any_call_with_its_id() -> None:
    assert check_same_call(request(), recorded=None, invalid_args=MemoryStatus.INVALID_ARGS) is None


def test_another_call_under_a_used_id_is_refused_as_invalid_arguments() -> None:
    recorded = call_fingerprint(request())
    refused = check_same_call(
        request({"memory_id": 24, "memory_content": "new"}),
        recorded=recorded,
        invalid_args=MemoryStatus.INVALID_ARGS,
    )
    assert isinstance(refused, Rejection)
    assert refused.status is MemoryStatus.INVALID_ARGS
    assert refused.data.model_dump(mode="json") == {"reason": TOOL_CALL_ID_REUSED}
    assert TOOL_CALL_ID_REUSED == "tool_call_id_reused"
    assert "already used for a different call" in refused.message


def test_the_refusal_is_in_the_family_of_the_tool_given() -> None:
    recorded = call_fingerprint(request())
    refused = check_same_call(
        request({"memory_id": 25, "memory_content": "x"}),
        recorded=recorded,
        invalid_args=MemoryStatus.SAVE_INVALID_ARGS,
    )
    assert refused is not None and refused.status is MemoryStatus.SAVE_INVALID_ARGS
