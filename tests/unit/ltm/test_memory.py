"""`ltm memory list`'s text form: a header per section, one memory a line, nothing raw."""

from __future__ import annotations

import io
from datetime import UTC, datetime

from contracts import MemoryListing, PersonalMemory, ServerMemory
from ltm.commands.memory import print_listing

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _printed(listing: MemoryListing) -> list[str]:
    out = io.StringIO()
    print_listing(listing, server_disc_id="111", persona_id=4, lineage=7, out=out)
    return out.getvalue().splitlines()


def test_sections_in_order_with_their_headers() -> None:
    listing = MemoryListing(
        server=(
            ServerMemory(
                memory_id=24,
                content="movie night is on Fridays",
                tags=("events",),
                created_at=T0,
                updated_at=T0,
                persona_lineage_id=7,
            ),
        ),
        personal={
            "333": (
                PersonalMemory(
                    memory_id=25,
                    content="{user} plays the violin",
                    created_at=T0,
                    updated_at=T0,
                    persona_lineage_id=0,
                ),
            ),
            "222": (),
        },
    )

    assert _printed(listing) == [
        "Server memories of 111, persona 4 (lineage 7): 1",
        "ID:24 [tags: events] movie night is on Fridays",
        "",
        "Personal memories of 333 (lineage 7 and global 0): 1",
        "ID:25 {user} plays the violin",
        "",
        "Personal memories of 222 (lineage 7 and global 0): none",
    ]


def test_line_breaks_and_terminal_controls_are_shown_escaped() -> None:
    content = "first line\nsecond\tcolumn\r\x1b[31mred\x1b[0m \x9b caf\u00e9 \\ {user}"
    listing = MemoryListing(
        server=(
            ServerMemory(
                memory_id=3, content=content, created_at=T0, updated_at=T0, persona_lineage_id=7
            ),
        )
    )

    assert _printed(listing)[1:] == [
        "ID:3 first line\\nsecond\\tcolumn\\r\\x1b[31mred\\x1b[0m \\x9b caf\u00e9 \\ {user}"
    ]
