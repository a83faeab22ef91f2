"""The envelope: filled in by a producer's model, required in every body that is received."""

from __future__ import annotations

import uuid

import orjson
import pytest
from pydantic import ValidationError

from contracts import (
    EVENT_TYPES,
    InvalidEnvelope,
    ToolCallContext,
    ToolCallRequested,
    decode_event,
    decode_tool_call,
    encode_event,
)
from contracts.envelope import ENVELOPE_FIELDS


def _call() -> ToolCallRequested:
    return ToolCallRequested(
        tool_call_id="call-1",
        tool_name="update_long_term_memory",
        arguments={"memory_id": 1, "memory_content": "x"},
        context=ToolCallContext(
            guild_id="111111111111111111",
            channel_id="222222222222222222",
            triggerer_id="333333333333333333",
            bot_user_id="444444444444444444",
            persona_id=1,
            shard_id=0,
        ),
    )


def test_a_producer_gets_the_envelope_filled_in() -> None:
    first, second = _call(), _call()
    assert first.event_id != second.event_id
    assert first.schema_version == 1 and first.event_type == "tool_call.requested"
    assert decode_tool_call(encode_event(first)) == first


@pytest.mark.parametrize("field", ENVELOPE_FIELDS)
def test_a_body_without_an_envelope_field_is_an_invalid_envelope(field: str) -> None:
    body = orjson.loads(encode_event(_call()))
    del body[field]
    with pytest.raises(InvalidEnvelope, match=field):
        decode_tool_call(orjson.dumps(body))
    with pytest.raises(InvalidEnvelope, match=field):
        decode_event(orjson.dumps(body))


def test_a_body_without_event_id_is_not_given_a_fresh_one() -> None:
    # A fresh random id would let two copies of one message pass de-duplication.
    body = orjson.loads(encode_event(_call()))
    del body["event_id"]
    with pytest.raises(ValidationError, match="missing event_id"):
        ToolCallRequested.model_validate_json(orjson.dumps(body))


@pytest.mark.parametrize("model", list(EVENT_TYPES.values()), ids=list(EVENT_TYPES))
def test_every_payload_schema_requires_the_envelope(model: type) -> None:
    required = model.model_json_schema()["required"]  # type: ignore[attr-defined]
    assert list(ENVELOPE_FIELDS) == required[: len(ENVELOPE_FIELDS)]
    assert "causation_id" not in required


def test_a_whole_envelope_with_a_given_id_keeps_it() -> None:
    event_id = uuid.uuid4()
    body = orjson.loads(encode_event(_call()))
    body["event_id"] = str(event_id)
    assert decode_tool_call(orjson.dumps(body)).event_id == event_id


def test_a_body_without_an_envelope_is_said_in_plain_words() -> None:
    with pytest.raises(InvalidEnvelope, match=r"^not an event envelope: the JSON object has no"):
        decode_event(b'{"hello": "world"}')


def test_another_schema_version_says_which_one_is_read() -> None:
    with pytest.raises(InvalidEnvelope, match=r"unsupported schema_version 9 \(this service reads"):
        decode_event(b'{"schema_version": 9, "event_type": "x"}')
