"""`context.seen` of `tool_call.requested`: what the LLM was shown, bounded and exactly shaped;
anything else makes the envelope invalid."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contracts import MAX_SEEN, InvalidEnvelope, decode_tool_call

ENVELOPE: dict[str, Any] = {
    "event_id": "8c5b4d4e-4c8d-4f5e-9a3b-1d2e3f4a5b6c",
    "event_type": "tool_call.requested",
    "schema_version": 1,
    "occurred_at": "2026-12-01T12:00:00Z",
    "causation_id": None,
    "tool_call_id": "call_1",
    "tool_name": "update_long_term_memory",
    "arguments": {"memory_id": 41, "memory_content": "x"},
    "context": {
        "guild_id": "900000000000000001",
        "channel_id": "900000000000000010",
        "triggerer_id": "100000000000000001",
        "bot_user_id": "100000000000000099",
        "persona_id": 7,
        "shard_id": 0,
    },
}


def _body(seen: Any) -> bytes:
    return json.dumps({**ENVELOPE, "context": {**ENVELOPE["context"], "seen": seen}}).encode()


def test_a_call_without_seen_has_none() -> None:
    call = decode_tool_call(json.dumps(ENVELOPE).encode())
    assert call.context.seen is None
    assert call.context.seen_revision(41) is None


@pytest.mark.parametrize(
    "seen",
    [
        {"41": 7},
        {"41": 0},
        {"41": 2**63 - 1, "7": 3},
        {"9" * 20: 1, "41": 7},
        {str(1000 + i): i for i in range(MAX_SEEN - 1)} | {"41": 7},
    ],
    ids=["one", "revision-0", "largest-revision", "twenty-digit-key", "at-the-limit"],
)
def test_seen_is_read(seen: dict[str, int]) -> None:
    call = decode_tool_call(_body(seen))
    assert call.context.seen == seen
    assert call.context.seen_revision(41) == seen["41"]
    assert call.context.seen_revision(42) is None


def test_a_key_is_read_as_a_number() -> None:
    assert decode_tool_call(_body({"041": 5})).context.seen_revision(41) == 5


def test_null_is_no_seen() -> None:
    assert decode_tool_call(_body(None)).context.seen is None


@pytest.mark.parametrize(
    "seen",
    [
        {"41": -1},
        {"41": 2**63},
        {"41": 1.0},
        {"41": 1.5},
        {"41": True},
        {"41": "3"},
        {"41": None},
        {"a41": 1},
        {"": 1},
        {"-41": 1},
        {" 41": 1},
        {"1" * 21: 1},
        {"４１": 1},
        [41, 1],
        "41:1",
        7,
        {str(i): 0 for i in range(MAX_SEEN + 1)},
    ],
    ids=[
        "negative",
        "over-bigint",
        "float",
        "fraction",
        "boolean",
        "string-value",
        "null-value",
        "letters",
        "empty-key",
        "minus",
        "space",
        "21-digits",
        "fullwidth-digits",
        "list",
        "string",
        "number",
        "over-the-limit",
    ],
)
def test_anything_else_makes_the_envelope_invalid(seen: Any) -> None:
    with pytest.raises(InvalidEnvelope, match=r"context\.seen"):
        decode_tool_call(_body(seen))
