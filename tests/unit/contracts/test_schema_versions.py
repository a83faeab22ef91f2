"""Each event type's own schema_version: `memory.*` at 2 (no texts), every other type at 1;
a body at another version than its type's is refused, and a `memory.*` body of version 1
(with texts, from a stream written before the upgrade) is read by the stream's readers only,
its texts dropped."""

from __future__ import annotations

import orjson
import pytest
from pydantic import ValidationError

from contracts import (
    EVENT_TYPES,
    CacheInvalidate,
    InvalidEnvelope,
    MemoryChanged,
    MemoryUpdated,
    amqp_properties,
    decode_event,
    decode_superseded_event,
    encode_event,
    schema_version_of,
)
from worker.adapters.broker import event_properties


def _updated() -> MemoryUpdated:
    return MemoryUpdated(
        tool_call_id="call-1",
        revision_id=5,
        scope="server_wide",
        memory_id=7,
        guild_id="111",
        channel_id="222",
        owner_id=None,
        actor_id="333",
        persona_id=1,
        persona_lineage_id=2,
    )


def _body(event: MemoryUpdated, **changes: object) -> bytes:
    return orjson.dumps({**orjson.loads(encode_event(event)), **changes})


@pytest.mark.parametrize("event_type", sorted(EVENT_TYPES))
def test_each_event_type_has_its_version(event_type: str) -> None:
    model = EVENT_TYPES[event_type]
    expected = 2 if issubclass(model, MemoryChanged) else 1
    assert schema_version_of(event_type) == model.SCHEMA_VERSION == expected
    assert model.model_fields["schema_version"].default == expected


def test_a_memory_event_holds_no_text_and_says_version_2_in_body_and_header() -> None:
    event = _updated()
    body = orjson.loads(encode_event(event))

    assert body["schema_version"] == 2 and body["revision_id"] == 5
    assert not {"content_before", "content_after"} & set(body)
    assert amqp_properties(event)["headers"] == {"schema_version": 2}
    headers = event_properties("e", "memory.updated", "call-1", None).headers
    assert headers == {"schema_version": 2}
    assert event_properties("e", "cache.invalidate", None, None).headers == {"schema_version": 1}
    assert decode_event(encode_event(event)) == event


def test_a_body_at_another_version_than_its_types_is_refused() -> None:
    with pytest.raises(InvalidEnvelope, match=r"schema_version 1 for memory\.updated"):
        decode_event(_body(_updated(), schema_version=1, content_before="a", content_after="b"))
    invalidation = orjson.loads(encode_event(CacheInvalidate(cache="user", key="42")))
    with pytest.raises(InvalidEnvelope, match=r"schema_version 2 for cache\.invalidate"):
        decode_event(orjson.dumps({**invalidation, "schema_version": 2}))
    with pytest.raises(ValidationError):
        MemoryUpdated.model_validate({**_updated().model_dump(), "schema_version": 1})


def test_a_version_1_memory_body_is_read_as_version_2_without_its_texts() -> None:
    event = _updated()
    old = _body(event, schema_version=1, content_before="secret a", content_after="secret b")

    read = decode_superseded_event(old)

    assert read == event
    assert b"secret" not in encode_event(read)


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        orjson.dumps({"event_type": "cache.invalidate", "schema_version": 1}),
        orjson.dumps({"event_type": "memory.updated", "schema_version": 2}),
    ],
)
def test_only_a_superseded_body_is_read_as_one(body: bytes) -> None:
    with pytest.raises(InvalidEnvelope):
        decode_superseded_event(body)
