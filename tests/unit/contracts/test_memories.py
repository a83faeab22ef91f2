"""What a persona sees of its memories, and the lines the LLM reads them as."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from contracts import (
    MemoryListing,
    PersonalMemory,
    ServerMemories,
    ServerMemory,
    UnknownPersona,
    memory_line,
    newest_first,
)

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
LINEAGE = 7
OTHER_LINEAGE = 8


def server_memory(
    memory_id: int,
    content: str = "the movie night is on Fridays",
    *,
    created_at: datetime = T0,
    lineage: int = LINEAGE,
    tags: tuple[str, ...] = (),
    updated_at: datetime | None = None,
) -> ServerMemory:
    return ServerMemory(
        memory_id=memory_id,
        content=content,
        tags=tags,
        created_at=created_at,
        updated_at=updated_at or created_at,
        persona_lineage_id=lineage,
    )


def personal_memory(
    memory_id: int, *, lineage: int = LINEAGE, created_at: datetime = T0
) -> PersonalMemory:
    return PersonalMemory(
        memory_id=memory_id,
        content=f"{{user}} fact {memory_id}",
        created_at=created_at,
        updated_at=created_at,
        persona_lineage_id=lineage,
    )


def ids(memories: tuple[ServerMemory, ...] | tuple[PersonalMemory, ...]) -> list[int]:
    return [memory.memory_id for memory in memories]


def test_a_line_is_the_id_then_the_content() -> None:
    assert memory_line(server_memory(24, "{user} hosts movie night")) == (
        "ID:24 {user} hosts movie night"
    )


def test_tags_go_between_the_id_and_the_content() -> None:
    memory = server_memory(3, "likes tea", tags=("food", "drinks"))
    assert memory_line(memory) == "ID:3 [tags: food, drinks] likes tea"


def test_newest_first_by_creation_then_by_id() -> None:
    memories = [
        server_memory(1, created_at=T0),
        server_memory(5, created_at=T0 - timedelta(hours=1)),
        server_memory(2, created_at=T0),
        server_memory(9, created_at=T0 - timedelta(days=1)),
    ]
    assert ids(newest_first(memories)) == [2, 1, 5, 9]


def test_an_update_keeps_a_memorys_place() -> None:
    older = server_memory(1, created_at=T0 - timedelta(hours=1), updated_at=T0 + timedelta(days=1))
    newer = server_memory(2, created_at=T0)
    assert ids(newest_first([older, newer])) == [2, 1]


def test_times_in_other_offsets_order_by_the_instant() -> None:
    tokyo = timezone(timedelta(hours=9))
    # 20:00 in Tokyo is 11:00 UTC: an hour before T0.
    earlier = server_memory(2, created_at=datetime(2026, 12, 1, 20, 0, tzinfo=tokyo))
    later = server_memory(1, created_at=T0)
    assert ids(newest_first([earlier, later])) == [1, 2]


def _server(*memories: ServerMemory) -> ServerMemories:
    return ServerMemories(
        server_disc_id="111111111111111111",
        persona_lineages={10: LINEAGE, 11: OTHER_LINEAGE},
        memories=memories,
    )


def test_a_persona_sees_the_server_memories_of_its_lineage_only() -> None:
    server = _server(
        server_memory(1, created_at=T0 - timedelta(hours=2)),
        server_memory(2, lineage=OTHER_LINEAGE),
        server_memory(3, created_at=T0 - timedelta(hours=1)),
    )

    assert ids(server.listing(10, {}).server) == [3, 1]
    assert ids(server.listing(11, {}).server) == [2]


def test_a_persona_sees_personal_memories_of_its_lineage_and_the_global_one() -> None:
    alice = (
        personal_memory(1, lineage=LINEAGE, created_at=T0 - timedelta(hours=3)),
        personal_memory(2, lineage=0, created_at=T0 - timedelta(hours=1)),
        personal_memory(3, lineage=OTHER_LINEAGE),
    )
    bob = (personal_memory(4, lineage=OTHER_LINEAGE),)

    listing = _server().listing(10, {"333": alice, "222": bob})

    assert ids(listing.personal["333"]) == [2, 1]
    assert listing.personal["222"] == ()
    assert list(listing.personal) == ["333", "222"]  # in the order asked


def test_a_persona_of_another_server_is_refused() -> None:
    with pytest.raises(UnknownPersona, match="server 111111111111111111 has no persona 12"):
        _server().listing(12, {})


def test_the_listing_gives_each_section_as_lines() -> None:
    listing = _server(server_memory(5, "likes tea", tags=("food",))).listing(
        10, {"333": (personal_memory(6, lineage=0),)}
    )

    assert listing.server_lines() == ["ID:5 [tags: food] likes tea"]
    assert listing.personal_lines("333") == ["ID:6 {user} fact 6"]
    assert listing.personal_lines("999") == []


def test_the_json_shape() -> None:
    teacher = "222222222222222222"
    listing = MemoryListing(
        server=(server_memory(5, tags=("food",)).model_copy(update={"teacher_id": teacher}),),
        personal={"333": (personal_memory(6, lineage=0),)},
    )

    shape = json.loads(listing.model_dump_json())

    assert set(shape) == {"server", "personal"}
    [server] = shape["server"]
    assert server == {
        "memory_id": 5,
        "content": "the movie night is on Fridays",
        "tags": ["food"],
        "created_at": "2026-12-01T12:00:00Z",
        "updated_at": "2026-12-01T12:00:00Z",
        "persona_lineage_id": LINEAGE,
        "revision_id": 0,
        "teacher_id": teacher,
    }
    [personal] = shape["personal"]["333"]
    assert "teacher_id" not in personal
    assert personal["memory_id"] == 6
    assert MemoryListing.model_validate_json(listing.model_dump_json()) == listing


def test_times_are_written_in_utc() -> None:
    tokyo = timezone(timedelta(hours=9))
    memory = server_memory(1, created_at=datetime(2026, 12, 1, 21, 0, tzinfo=tokyo))
    assert json.loads(memory.model_dump_json())["created_at"] == "2026-12-01T12:00:00Z"
