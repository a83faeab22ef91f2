"""The create tool's decisions (docs/behaviour.md, create steps), step by step, and its embed."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts import CREATE_COLOR, MemoryStatus, Participant
from tests.unit.worker.core.test_embed import assert_within_limits
from tests.unit.worker.given import ALICE, ALICE_ID, ALICE_ROW, BOT_ID, MATRIX_ID, context, state
from worker.core.create import (
    CreateArguments,
    ExistingMemory,
    NewMemory,
    ScopeContents,
    ScopeKey,
    ServerFallback,
    bridge_user_name,
    check_create_owner,
    check_create_server_state,
    check_create_target,
    content_key,
    is_self,
    parse_create_arguments,
    plan_create,
    prepare_new_content,
    result_of_create,
    with_bridge_user_name,
)
from worker.core.embed import build_created_embed
from worker.core.model import (
    AmbiguousUser,
    DirectoryMember,
    NoSuchUser,
    Rejection,
    ResolvedUser,
)

# -- step 1: arguments ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (
            {"memory_content": "likes tea", "memory_scope": "server_wide"},
            CreateArguments("likes tea", "server_wide", None),
        ),
        (
            {"memory_content": "x", "memory_scope": "  Server_Wide ", "target_user": 42},
            CreateArguments("x", "server_wide", None),
        ),
        (
            {"memory_content": "x", "memory_scope": "TARGET_USER", "target_user": " Alice "},
            CreateArguments("x", "target_user", "Alice"),
        ),
        (
            {
                "memory_content": "x",
                "memory_scope": "target_user",
                "target_user": " ",
                "target_user_nickname": "Ali",
            },
            CreateArguments("x", "target_user", "Ali"),
        ),
        (
            {
                "memory_content": "x",
                "memory_scope": "target_user",
                "target_user_discord_id": ALICE_ID,
                "extra": [1],
            },
            CreateArguments("x", "target_user", ALICE_ID),
        ),
    ],
)
def test_arguments_are_read(raw: Any, expected: CreateArguments) -> None:
    assert parse_create_arguments(raw) == expected


@pytest.mark.parametrize(
    "raw",
    [
        None,
        "save this",
        ["memory_content"],
        {"memory_scope": "server_wide"},
        {"memory_content": None, "memory_scope": "server_wide"},
        {"memory_content": 5, "memory_scope": "server_wide"},
        {"memory_content": "x"},
        {"memory_content": "x", "memory_scope": None},
        {"memory_content": "x", "memory_scope": 1},
        {"memory_content": "x", "memory_scope": "everyone"},
        {"memory_content": "x", "memory_scope": "server wide"},
        {"memory_content": "x", "memory_scope": "target_user"},
        {"memory_content": "x", "memory_scope": "target_user", "target_user": "   "},
        {"memory_content": "x", "memory_scope": "target_user", "target_user": 7},
        {
            "memory_content": "x",
            "memory_scope": "target_user",
            "target_user": "Alice",
            "target_user_nickname": ["Ali"],
        },
    ],
)
def test_bad_arguments_are_invalid_args(raw: Any) -> None:
    refused = parse_create_arguments(raw)
    assert isinstance(refused, Rejection)
    assert refused.status is MemoryStatus.SAVE_INVALID_ARGS
    assert refused.message


def test_the_content_is_checked_before_the_scope() -> None:
    refused = parse_create_arguments({"memory_content": 1, "memory_scope": "nowhere"})
    assert isinstance(refused, Rejection)
    assert "memory_content" in refused.message


# -- steps 2 and 3: server state and feature flag ------------------------------------------


def test_a_sound_server_state_passes() -> None:
    assert check_create_server_state(state(), context()) is None


@pytest.mark.parametrize(
    ("server_state", "status"),
    [
        (None, MemoryStatus.SAVE_INTERNAL_ERROR),
        (state(persona_server_id=9), MemoryStatus.SAVE_INTERNAL_ERROR),
        (state(persona_lineage_id=0), MemoryStatus.SAVE_INTERNAL_ERROR),
        # The server's state comes before the flag: lineage 0 is not "disabled".
        (
            state(persona_lineage_id=0, self_teaching_enabled=False),
            MemoryStatus.SAVE_INTERNAL_ERROR,
        ),
        (state(self_teaching_enabled=False), MemoryStatus.SAVE_DISABLED),
    ],
)
def test_server_state_refusals(server_state: Any, status: MemoryStatus) -> None:
    refused = check_create_server_state(server_state, context())
    assert refused is not None
    assert refused.status is status


# -- step 4: content -----------------------------------------------------------------------


def test_content_is_trimmed_and_sanitized() -> None:
    assert prepare_new_content("  {alice} likes {USER} ", 1000) == "alice likes {USER}"


@pytest.mark.parametrize("raw", ["", "   \n\t", "x" * 11, "a\x00b"])
def test_content_that_cannot_be_a_memory_is_invalid_content(raw: str) -> None:
    refused = prepare_new_content(raw, 10)
    assert isinstance(refused, Rejection)
    assert refused.status is MemoryStatus.SAVE_INVALID_CONTENT


# -- step 5: the person --------------------------------------------------------------------


@pytest.mark.parametrize("query", ["self", "SELF", " @Self ", "@self"])
def test_self_means_the_bot(query: str) -> None:
    assert is_self(query)


@pytest.mark.parametrize("query", ["myself", "self2", "Selfie", "her self"])
def test_only_self_means_the_bot(query: str) -> None:
    assert not is_self(query)


def test_a_person_is_the_owner() -> None:
    assert check_create_target(ALICE, bot_user_id=BOT_ID) == ALICE


@pytest.mark.parametrize(
    "resolution",
    [
        ResolvedUser(user_id=BOT_ID, label="Tomori"),
        ResolvedUser(user_id="100000000000000077", label="Helper", is_bot=True, via="mention"),
    ],
)
def test_a_bot_falls_back_to_the_server(resolution: ResolvedUser) -> None:
    assert check_create_target(resolution, bot_user_id=BOT_ID) == ServerFallback("bot")


@pytest.mark.parametrize(
    ("label", "name"),
    [
        ("Alice (Matrix)", "Alice"),
        ("Alice (matrix) ", "Alice"),
        ("Alice [bridge]", "Alice [bridge]"),
        ("(Matrix)", "(Matrix)"),
    ],
)
def test_a_bridge_user_falls_back_to_the_server_with_their_name(label: str, name: str) -> None:
    vias: tuple[Literal["matrix"], Literal["participant"]] = ("matrix", "participant")
    for via in vias:
        resolution = ResolvedUser(user_id=MATRIX_ID, label=label, via=via)
        assert check_create_target(resolution, bot_user_id=BOT_ID) == ServerFallback(
            "bridge_user", name
        )
    assert bridge_user_name(label) == name


def test_ambiguity_and_nobody_are_refused() -> None:
    ambiguous = check_create_target(AmbiguousUser(("A (@a)", "A (@b)")), bot_user_id=BOT_ID)
    assert isinstance(ambiguous, Rejection)
    assert ambiguous.status is MemoryStatus.SAVE_AMBIGUOUS_USER
    assert ambiguous.data.candidates == ("A (@a)", "A (@b)")
    nobody = check_create_target(NoSuchUser(), bot_user_id=BOT_ID)
    assert isinstance(nobody, Rejection)
    assert nobody.status is MemoryStatus.SAVE_USER_NOT_FOUND


@pytest.mark.parametrize(
    ("content", "written"),
    [
        ("{user} plays chess", "Alice plays chess"),
        ("{{USER}} and {User} and {bot}", "Alice and Alice and {bot}"),
        ("{{{user}}}", "Alice"),
        ("no placeholder", "no placeholder"),
    ],
)
def test_a_bridge_users_name_replaces_user(content: str, written: str) -> None:
    assert with_bridge_user_name(content, "Alice", 1000) == written


def test_a_name_that_makes_the_memory_too_long_is_invalid_content() -> None:
    refused = with_bridge_user_name("{user}" * 3, "Bartholomew", 30)
    assert isinstance(refused, Rejection)
    assert refused.status is MemoryStatus.SAVE_INVALID_CONTENT
    assert "33" in refused.message


def test_a_name_is_sanitized_like_any_text() -> None:
    assert with_bridge_user_name("{user} waves", "{Evil}", 100) == "Evil waves"


ALICE_MEMBER = (DirectoryMember(ALICE_ID, "alice", "Alice"),)


@pytest.mark.parametrize(
    ("user", "ctx", "directory", "status", "words"),
    [
        (ALICE_ROW, context(), ALICE_MEMBER, None, None),
        (None, context(), ALICE_MEMBER, MemoryStatus.SAVE_USER_NOT_FOUND, "server_wide"),
        (ALICE_ROW, context(), (), MemoryStatus.SAVE_INVALID_SCOPE, "not a member"),
        (ALICE_ROW, context(guild_id=None), (), MemoryStatus.SAVE_INVALID_SCOPE, "direct message"),
        (
            replace(ALICE_ROW, privacy_level=1),
            context(),
            ALICE_MEMBER,
            MemoryStatus.SAVE_PRIVACY_RESTRICTED,
            "no personal memory",
        ),
        (
            replace(ALICE_ROW, privacy_level=2),
            context(),
            ALICE_MEMBER,
            MemoryStatus.SAVE_PRIVACY_RESTRICTED,
            "no personal memory",
        ),
    ],
)
def test_the_personal_paths_checks_in_the_create_tools_words(
    user: Any, ctx: Any, directory: Any, status: MemoryStatus | None, words: str | None
) -> None:
    refused = check_create_owner(ALICE, user, context=ctx, directory=directory)
    if status is None:
        assert refused is None
        return
    assert refused is not None
    assert refused.status is status
    assert words is not None and words in refused.message
    assert "changed" not in refused.message


def test_a_participant_seen_as_a_member_may_get_a_personal_memory() -> None:
    ctx = context(participants=[Participant(user_id=ALICE_ID, display_label="Alice")])
    assert check_create_owner(ALICE, ALICE_ROW, context=ctx, directory=()) is None


# -- steps 6 and 7: duplicates and the limit -------------------------------------------------

SERVER = ScopeKey.of_server(3, 42)
PERSONAL = ScopeKey.of_owner(ALICE_ID, 42)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("likes tea", "likes tea"),
        ("  Likes   TEA\n", "likes tea"),
        ("STRASSE", "straße"),
        ("likes\u00a0tea", "likes tea"),
    ],
)
def test_the_same_text(a: str, b: str) -> None:
    assert content_key(a) == content_key(b)


@pytest.mark.parametrize(("a", "b"), [("likes tea", "likes tea!"), ("likes tea", "likestea")])
def test_not_the_same_text(a: str, b: str) -> None:
    assert content_key(a) != content_key(b)


def test_a_duplicate_names_the_oldest_memory_that_says_it() -> None:
    contents = ScopeContents(
        {SERVER: [ExistingMemory(90, "Likes  tea"), ExistingMemory(12, "likes tea")]}
    )
    refused = contents.admit(SERVER, "likes TEA", memory_id=100, limit=25, owner_label=None)
    assert isinstance(refused, Rejection)
    assert refused.status is MemoryStatus.SAVE_DUPLICATE
    assert refused.data.memory_id == 12
    assert "ID:12" in refused.message


def test_the_limit_counts_what_the_scope_holds() -> None:
    held = [ExistingMemory(n, f"fact {n}") for n in range(1, 4)]
    contents = ScopeContents({PERSONAL: held})
    refused = contents.admit(PERSONAL, "new", memory_id=100, limit=3, owner_label="Alice")
    assert isinstance(refused, Rejection)
    assert refused.status is MemoryStatus.SAVE_LIMIT_EXCEEDED
    assert (refused.data.current_count, refused.data.max_allowed) == (3, 3)
    assert refused.data.target_user == "Alice"


def test_a_duplicate_is_found_before_the_limit() -> None:
    contents = ScopeContents({SERVER: [ExistingMemory(n, f"fact {n}") for n in range(1, 31)]})
    refused = contents.admit(SERVER, "fact 28", memory_id=100, limit=25, owner_label=None)
    assert isinstance(refused, Rejection)
    assert (refused.status, refused.data.memory_id) == (MemoryStatus.SAVE_DUPLICATE, 28)


def test_creations_of_a_batch_see_each_other() -> None:
    contents = ScopeContents({SERVER: [ExistingMemory(1, "one")]})
    outcomes = [
        contents.admit(SERVER, text, memory_id=memory_id, limit=3, owner_label=None)
        for memory_id, text in [(10, "two"), (11, " TWO "), (12, "three"), (13, "four")]
    ]
    assert outcomes[0] is None
    assert isinstance(outcomes[1], Rejection) and outcomes[1].data.memory_id == 10
    assert outcomes[2] is None
    assert isinstance(outcomes[3], Rejection)
    assert outcomes[3].status is MemoryStatus.SAVE_LIMIT_EXCEEDED
    assert outcomes[3].data.current_count == 3


def test_scopes_are_counted_apart() -> None:
    contents = ScopeContents({SERVER: [ExistingMemory(1, "same")]})
    assert contents.admit(PERSONAL, "same", memory_id=2, limit=1, owner_label="Alice") is None
    other_lineage = replace(SERVER, lineage=43)
    assert contents.admit(other_lineage, "same", memory_id=3, limit=1, owner_label=None) is None


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from(["a", "A", " a ", "b", "c", "d", "e"]), max_size=12),
    st.integers(min_value=1, max_value=4),
)
def test_never_over_the_limit_never_the_same_text_twice(texts: list[str], limit: int) -> None:
    contents = ScopeContents({})
    admitted = [
        text
        for memory_id, text in enumerate(texts, start=1)
        if contents.admit(SERVER, text, memory_id=memory_id, limit=limit, owner_label=None) is None
    ]
    assert len(admitted) <= limit
    assert len({content_key(text) for text in admitted}) == len(admitted)


# -- the result and the embed ----------------------------------------------------------------

NEW_SERVER_MEMORY = NewMemory(
    scope="server_wide",
    memory_id=30,
    revision_id=7,
    content="{user} hosts movie night",
    server_id=3,
    persona_id=7,
    persona_lineage_id=42,
)
NEW_PERSONAL_MEMORY = replace(
    NEW_SERVER_MEMORY,
    scope="target_user",
    content="{user} trusts {bot}",
    owner_user_id=11,
    owner_disc_id=ALICE_ID,
    owner_label="Alice (@alice)",
)


# Steps 5 to 7 passed: the memory to save, under the ids allocated for it.


def test_a_personal_memory_is_planned_for_its_owner() -> None:
    key = ScopeKey.of_owner(ALICE_ID, 42)
    planned = plan_create(
        key, "{user} trusts {bot}", state(), (ALICE, ALICE_ROW), ids=(30, 7), fallback=None
    )
    assert planned == NEW_PERSONAL_MEMORY


def test_a_server_memory_is_planned_with_its_fallback() -> None:
    key = ScopeKey.of_server(3, 42)
    fallback = ServerFallback("bridge_user", "Al")
    planned = plan_create(
        key, "{user} hosts movie night", state(), None, ids=(30, 7), fallback=fallback
    )
    assert planned == replace(NEW_SERVER_MEMORY, fallback="bridge_user", bridge_user="Al")


def test_the_results_data() -> None:
    status, message, data = result_of_create(NEW_PERSONAL_MEMORY)
    assert status is MemoryStatus.SAVED
    assert "ID:30" in message
    assert data.model_dump(mode="json") == {
        "scope": "target_user",
        "memory_id": 30,
        "content_saved": "{user} trusts {bot}",
        "target_user": "Alice (@alice)",
    }
    _, message, data = result_of_create(
        replace(NEW_SERVER_MEMORY, fallback="bridge_user", bridge_user="Al")
    )
    assert data.model_dump(mode="json") == {
        "scope": "server_wide",
        "memory_id": 30,
        "content_saved": "{user} hosts movie night",
        "fallback": "bridge_user",
    }
    assert '"Al"' in message
    _, message, data = result_of_create(replace(NEW_SERVER_MEMORY, fallback="bot"))
    assert data.fallback == "bot" and "bots" in message


def test_the_created_embed_shows_the_saved_text_in_green() -> None:
    built = build_created_embed(
        NEW_SERVER_MEMORY,
        persona_nickname="Tomori",
        triggerer_name="Bob",
        owner_name=None,
        personal_memories_enabled=True,
        owner_blacklisted=False,
    )
    assert_within_limits(built)
    assert built.color == CREATE_COLOR == 0x2ECC71
    assert built.title == "Tomori learned something new"
    assert "Bob hosts movie night" in built.description
    assert built.footer == "ID:30 · Manage server memories with /memory server"
    assert built.fields == ()


def test_the_created_embed_of_a_personal_memory_names_the_person() -> None:
    built = build_created_embed(
        NEW_PERSONAL_MEMORY,
        persona_nickname="Tomori",
        triggerer_name="Bob",
        owner_name="Alice",
        personal_memories_enabled=True,
        owner_blacklisted=True,
    )
    assert built.title == "Tomori learned something about Alice"
    assert "Alice trusts Tomori" in built.description
    assert built.footer == "ID:30 · Alice is excluded from personalization in this server"


@settings(max_examples=100, deadline=None)
@given(st.text(min_size=1, max_size=5000), st.text(min_size=1, max_size=300))
def test_the_created_embed_stays_within_discords_limits(content: str, name: str) -> None:
    built = build_created_embed(
        replace(NEW_PERSONAL_MEMORY, content=content),
        persona_nickname=name,
        triggerer_name=name,
        owner_name=name,
        personal_memories_enabled=True,
        owner_blacklisted=False,
    )
    assert_within_limits(built)
