"""The gateway's `context.seen`: what the LLM was shown, from the listing the reader returned."""

from __future__ import annotations

from datetime import UTC, datetime

from contracts import MAX_SEEN, MemoryListing, PersonalMemory, ServerMemory
from gateway.tool_client import MessageContext, seen_revisions

NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)


def _server(memory_id: int, revision_id: int) -> ServerMemory:
    return ServerMemory(
        memory_id=memory_id,
        content=f"fact {memory_id}",
        created_at=NOW,
        updated_at=NOW,
        persona_lineage_id=7,
        revision_id=revision_id,
    )


def _personal(memory_id: int, revision_id: int) -> PersonalMemory:
    return PersonalMemory(
        memory_id=memory_id,
        content=f"fact {memory_id}",
        created_at=NOW,
        updated_at=NOW,
        persona_lineage_id=0,
        revision_id=revision_id,
    )


def test_a_listing_gives_each_memory_its_revision() -> None:
    listing = MemoryListing(
        server=(_server(41, 12), _server(40, 0)),
        personal={"333": (_personal(50, 3),), "444": ()},
    )
    assert seen_revisions(listing) == {"41": 12, "40": 0, "50": 3}


def test_a_mapping_is_taken_as_ids_and_revisions() -> None:
    assert seen_revisions({41: 12, "7": 0}) == {"41": 12, "7": 0}
    assert seen_revisions(None) is None


def test_a_listing_larger_than_the_contract_keeps_its_first_entries() -> None:
    listing = MemoryListing(server=tuple(_server(i, i) for i in range(1, MAX_SEEN + 20)))
    seen = seen_revisions(listing)
    assert seen is not None and len(seen) == MAX_SEEN
    assert "1" in seen and str(MAX_SEEN + 1) not in seen


def test_the_message_context_carries_it_on_the_wire() -> None:
    context = MessageContext(
        111, 444, 222, 555, 9, 0, seen=MemoryListing(server=(_server(41, 12),))
    )
    assert context.to_contract().seen == {"41": 12}
    assert MessageContext(111, 444, 222, 555, 9, 0).to_contract().seen is None
