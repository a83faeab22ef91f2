"""The embed after a committed write (docs/behaviour.md, "The embed"), within Discord's limits."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts import DELETE_COLOR, UPDATE_COLOR, EmbedPayload
from contracts.embeds import (
    DESCRIPTION_LIMIT,
    FIELD_VALUE_LIMIT,
    FOOTER_LIMIT,
    TITLE_LIMIT,
    TOTAL_LIMIT,
)
from worker.core.embed import build_embed, render_placeholders
from worker.core.model import MemoryWrite, WrittenMemory

SERVER_UPDATE = MemoryWrite(
    scope="server_wide",
    memory_id=24,
    content="{user} likes tea",
    server_id=3,
    persona_lineage_id=42,
)
SERVER_DELETE = replace(SERVER_UPDATE, content=None)
PERSONAL_UPDATE = replace(
    SERVER_UPDATE,
    scope="target_user",
    content="{user} trusts {bot}",
    owner_user_id=11,
    owner_disc_id="100000000000000002",
    owner_label="Alice (@alice)",
)
PERSONAL_DELETE = replace(PERSONAL_UPDATE, content=None)
WRITTEN = WrittenMemory(
    revision_id=5, content_before="{user} liked {{CHAR}}", persona_lineage_id=42
)


def embed(
    write: MemoryWrite = SERVER_UPDATE,
    written: WrittenMemory = WRITTEN,
    *,
    persona: str = "Tomori",
    triggerer: str = "Bob",
    owner: str | None = "Alice",
    enabled: bool = True,
    blacklisted: bool = False,
) -> EmbedPayload:
    built = build_embed(
        write,
        written,
        persona_nickname=persona,
        triggerer_name=triggerer,
        owner_name=owner,
        personal_memories_enabled=enabled,
        owner_blacklisted=blacklisted,
    )
    assert_within_limits(built)
    return built


def assert_within_limits(built: EmbedPayload) -> None:
    assert len(built.title) <= TITLE_LIMIT
    assert len(built.description) <= DESCRIPTION_LIMIT
    assert len(built.footer or "") <= FOOTER_LIMIT
    assert all(len(field.value) <= FIELD_VALUE_LIMIT for field in built.fields)
    assert built.total_length() <= TOTAL_LIMIT
    for block in [built.description, *(field.value for field in built.fields)]:
        assert_one_code_block(block)


def assert_one_code_block(block: str) -> None:
    assert block.startswith("```\n")
    assert block.endswith("\n```")
    inner = block[4:-4]
    assert "``" not in inner  # no run of backticks that could close the fence


def inner(block: str) -> str:
    return block[4:-4]


# Colours and titles.


@pytest.mark.parametrize(
    ("write", "color"),
    [
        (SERVER_UPDATE, UPDATE_COLOR),
        (PERSONAL_UPDATE, UPDATE_COLOR),
        (SERVER_DELETE, DELETE_COLOR),
        (PERSONAL_DELETE, DELETE_COLOR),
    ],
)
def test_colours(write: MemoryWrite, color: int) -> None:
    assert embed(write).color == color
    assert UPDATE_COLOR == 0x25D4DA
    assert DELETE_COLOR == 0xE74C3C


def test_titles_name_the_persona_and_what_happened() -> None:
    assert embed(SERVER_UPDATE).title == "Tomori updated a memory"
    assert embed(SERVER_DELETE).title == "Tomori forgot a memory"
    assert embed(PERSONAL_UPDATE).title == "Tomori updated a memory about Alice"
    assert embed(PERSONAL_DELETE).title == "Tomori forgot a memory about Alice"


def test_personal_title_falls_back_to_the_owner_label() -> None:
    assert embed(PERSONAL_UPDATE, owner=None).title.endswith("about Alice (@alice)")


def test_title_names_show_as_written() -> None:
    title = embed(PERSONAL_UPDATE, persona="*To_mori*", owner="~~Al`ice~~").title
    assert title == r"\*To\_mori\* updated a memory about \~\~Al\`ice\~\~"


def test_title_names_are_one_line() -> None:
    assert embed(persona="Tomo\nri").title == "Tomo ri updated a memory"


# Descriptions and the memory before.


def test_server_update_shows_new_and_old_text() -> None:
    built = embed(SERVER_UPDATE)
    assert built.description == "```\nBob likes tea\n```"
    assert [(field.name, field.value) for field in built.fields] == [
        ("Before", "```\nBob liked Tomori\n```")
    ]


def test_server_delete_shows_the_text_that_was_deleted() -> None:
    built = embed(SERVER_DELETE)
    assert built.description == "```\nBob liked Tomori\n```"
    assert built.fields == ()


def test_personal_memories_show_the_owner_as_user() -> None:
    built = embed(PERSONAL_UPDATE, triggerer="Bob", owner="Alice")
    assert built.description == "```\nAlice trusts Tomori\n```"
    assert built.fields[0].value == "```\nAlice liked Tomori\n```"
    assert embed(PERSONAL_DELETE).description == "```\nAlice liked Tomori\n```"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("{user}", "Bob"),
        ("{USER}", "Bob"),
        ("{{user}}", "Bob"),
        ("{{User}}", "Bob"),
        ("{bot}", "Tomori"),
        ("{Bot}", "Tomori"),
        ("{{BOT}}", "Tomori"),
        ("{char}", "Tomori"),
        ("{{char}}", "Tomori"),
        ("{CHAR}", "Tomori"),
        ("{{{user}}}", "{Bob}"),
        ("{users}", "{users}"),
        ("{ user }", "{ user }"),
        ("{user} and {bot}", "Bob and Tomori"),
    ],
)
def test_render_placeholders(text: str, shown: str) -> None:
    assert render_placeholders(text, user_name="Bob", persona_nickname="Tomori") == shown


def test_names_are_not_placeholders_themselves() -> None:
    # A name that looks like a token is shown as written, not substituted again.
    assert render_placeholders("{user}", user_name="{bot}", persona_nickname="T") == "{bot}"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("``", "`\u200b`"),
        ("```", "`\u200b`\u200b`"),
        ("a ```python``` b", "a `\u200b`\u200b`python`\u200b`\u200b` b"),
        ("`one`", "`one`"),
    ],
)
def test_backtick_runs_are_broken_up(text: str, shown: str) -> None:
    write = replace(SERVER_UPDATE, content=text)
    assert inner(embed(write).description) == shown


def test_backticks_in_names_are_broken_up_too() -> None:
    built = embed(SERVER_UPDATE, triggerer="``` @everyone")
    assert inner(built.description) == "`\u200b`\u200b` @everyone likes tea"


# Footers.


def test_server_footer() -> None:
    assert embed(SERVER_UPDATE).footer == "ID:24 · Manage server memories with /memory server"
    # Personalization settings do not concern server memories.
    assert "/memory server" in (embed(SERVER_DELETE, enabled=False, blacklisted=True).footer or "")


@pytest.mark.parametrize(
    ("enabled", "blacklisted", "footer"),
    [
        (True, False, "ID:24 · Manage personal memories with /memory personal"),
        (
            False,
            False,
            "ID:24 · Personalization is off in this server, so this memory is not used here",
        ),
        (
            False,
            True,
            "ID:24 · Personalization is off in this server, so this memory is not used here",
        ),
        (True, True, "ID:24 · Alice is excluded from personalization in this server"),
    ],
)
def test_personal_footer(enabled: bool, blacklisted: bool, footer: str) -> None:
    for write in (PERSONAL_UPDATE, PERSONAL_DELETE):
        assert embed(write, enabled=enabled, blacklisted=blacklisted).footer == footer


# Limits.


def test_a_long_memory_full_of_backticks_fits() -> None:
    text = "`" * 1000
    built = embed(replace(SERVER_UPDATE, content=text), replace(WRITTEN, content_before=text))
    assert inner(built.description) == "`\u200b" * 999 + "`"  # 1999 characters: fits whole
    assert inner(built.fields[0].value).endswith("…")
    assert len(built.fields[0].value) == FIELD_VALUE_LIMIT


def test_very_long_names_fit() -> None:
    name = "N" * 5000
    built = embed(
        replace(PERSONAL_UPDATE, content="{user} {bot} " * 70),
        replace(WRITTEN, content_before="{user}" * 200),
        persona=name,
        triggerer=name,
        owner=name,
        blacklisted=True,
    )
    assert built.title.endswith("…")
    assert inner(built.description).endswith("…")
    assert inner(built.fields[0].value).endswith("…")
    assert built.total_length() <= TOTAL_LIMIT


def test_every_part_at_its_longest_fits() -> None:
    name = "*" * 5000  # escaped in the title, so twice as long there
    built = embed(
        replace(PERSONAL_UPDATE, content="{bot}" * 1000),
        replace(WRITTEN, content_before="{bot}" * 1000),
        persona=name,
        owner=name,
        blacklisted=True,
    )
    assert len(built.title) == TITLE_LIMIT
    assert len(built.description) == DESCRIPTION_LIMIT
    assert len(built.fields[0].value) == FIELD_VALUE_LIMIT
    assert built.total_length() <= TOTAL_LIMIT


@settings(max_examples=200)
@given(
    content=st.one_of(st.none(), st.text(max_size=3000)),
    before=st.text(max_size=3000),
    persona=st.text(max_size=300),
    triggerer=st.text(max_size=300),
    owner=st.one_of(st.none(), st.text(max_size=300)),
    personal=st.booleans(),
    enabled=st.booleans(),
    blacklisted=st.booleans(),
)
def test_always_within_limits(
    *,
    content: str | None,
    before: str,
    persona: str,
    triggerer: str,
    owner: str | None,
    personal: bool,
    enabled: bool,
    blacklisted: bool,
) -> None:
    write = replace(PERSONAL_UPDATE if personal else SERVER_UPDATE, content=content)
    built = embed(
        write,
        replace(WRITTEN, content_before=before),
        persona=persona,
        triggerer=triggerer,
        owner=owner,
        enabled=enabled,
        blacklisted=blacklisted,
    )
    assert built.color == (DELETE_COLOR if content is None else UPDATE_COLOR)
    assert len(built.fields) == (0 if content is None else 1)


@given(st.text(alphabet=st.sampled_from("`a{}\n"), max_size=500))
def test_short_texts_are_shown_whole(text: str) -> None:
    built = embed(replace(SERVER_UPDATE, content=text))
    assert inner(built.description).replace("\u200b", "") == render_placeholders(
        text, user_name="Bob", persona_nickname="Tomori"
    )
