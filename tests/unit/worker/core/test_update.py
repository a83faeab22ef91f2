"""The update tool's decisions: step 1's arguments exactly as docs/behaviour.md describes them,
then the decisions between facts (steps 2, 3 and 5 to 8); `test_service` checks their order."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contracts import (
    MemoryStatus,
    Participant,
    ResultData,
    ToolCallContext,
)
from tests.unit.worker.given import (
    ALICE,
    ALICE_ID,
    ALICE_ROW,
    BOT_ID,
    GUILD_ID,
    MATRIX_ID,
    OTHER_GUILD_ID,
    TRIGGERER_ID,
    context,
    state,
)
from worker.core.model import (
    AmbiguousUser,
    DirectoryMember,
    MemoryEditPolicy,
    MemoryWrite,
    NoSuchUser,
    Rejection,
    ResolvedUser,
    ServerState,
    StoredUser,
    UpdateArguments,
    WrittenMemory,
)
from worker.core.update import (
    MAX_MEMORY_ID,
    check_update_owner,
    check_update_server_state,
    check_update_target,
    forbidden,
    not_found,
    parse_update_arguments,
    plan_update,
    result_of_update,
)

# Step 1: the arguments.


def valid(**extra: Any) -> dict[str, Any]:
    return {"memory_id": 24, "memory_content": "likes tea", **extra}


def rejected(raw: object) -> Rejection:
    result = parse_update_arguments(raw)
    assert isinstance(result, Rejection), result
    assert result.status is MemoryStatus.INVALID_ARGS
    assert result.message
    return result


def accepted(raw: object) -> UpdateArguments:
    result = parse_update_arguments(raw)
    assert isinstance(result, UpdateArguments), result
    return result


def test_a_plain_call() -> None:
    assert parse_update_arguments(valid()) == UpdateArguments(
        memory_id=24, content="likes tea", target_user=None
    )


@pytest.mark.parametrize(
    ("memory_id", "expected"),
    [
        (1, 1),
        (24, 24),
        (24.0, 24),
        (1.0, 1),
        (2**53 - 1, 2**53 - 1),
        (MAX_MEMORY_ID, MAX_MEMORY_ID),
        (1e2, 100),
    ],
)
def test_accepted_memory_ids(memory_id: object, expected: int) -> None:
    parsed = accepted(valid(memory_id=memory_id))
    assert parsed.memory_id == expected
    assert type(parsed.memory_id) is int


@pytest.mark.parametrize(
    "memory_id",
    [
        "24",
        "",
        True,
        False,
        24.5,
        0.1,
        0,
        0.0,
        -0.0,
        -1,
        -24.0,
        None,
        2**53,
        2**53 + 1,
        float(2**53),
        2**64,
        1e300,
        math.nan,
        math.inf,
        -math.inf,
        [24],
        {"id": 24},
    ],
)
def test_rejected_memory_ids(memory_id: object) -> None:
    assert "memory_id" in rejected(valid(memory_id=memory_id)).message


def test_missing_memory_id() -> None:
    assert "memory_id" in rejected({"memory_content": "x"}).message


def test_memory_ids_as_json_reads_them() -> None:
    # The bodies come from JSON: `24.0` is a float there, `true` a bool.
    assert accepted(json.loads('{"memory_id": 24.0, "memory_content": ""}')).memory_id == 24
    rejected(json.loads('{"memory_id": true, "memory_content": ""}'))
    rejected(json.loads('{"memory_id": 9007199254740992, "memory_content": ""}'))
    assert (
        accepted(json.loads('{"memory_id": 9007199254740991, "memory_content": ""}')).memory_id
        == 2**53 - 1
    )


@pytest.mark.parametrize("content", [None, 1, 1.5, True, ["a"], {"a": "b"}])
def test_rejected_memory_content(content: object) -> None:
    assert "memory_content" in rejected(valid(memory_content=content)).message


def test_missing_memory_content() -> None:
    assert "memory_content" in rejected({"memory_id": 24}).message


@pytest.mark.parametrize("content", ["", "   ", "likes {tea}", "  spaced  "])
def test_memory_content_is_kept_as_given(content: str) -> None:
    # Trimming and sanitizing are step 4's business.
    assert accepted(valid(memory_content=content)).content == content


@pytest.mark.parametrize("raw", [None, [], ["memory_id", 24], "text", 24, True, 1.5])
def test_arguments_that_are_not_an_object(raw: object) -> None:
    rejected(raw)


def test_unknown_extra_arguments_are_ignored() -> None:
    parsed = accepted(valid(reason="outdated", tags=["x"], memory_id_old=3))
    assert parsed == UpdateArguments(memory_id=24, content="likes tea", target_user=None)


def test_the_first_problem_is_reported() -> None:
    assert "memory_id" in rejected({"memory_id": "24", "memory_content": 5}).message
    assert "memory_content" in rejected({"memory_id": 24, "target_user": 5}).message


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"target_user": "Alice"}, "Alice"),
        ({"target_user": "  Alice  "}, "Alice"),  # trimmed, not otherwise normalized
        ({"target_user": "@Alice  Smith"}, "@Alice  Smith"),
        ({"target_user": None}, None),
        ({"target_user": ""}, None),
        ({"target_user": " \t\n"}, None),
        ({}, None),
        # Legacy names, read when target_user is absent or blank, in this order.
        ({"target_user_nickname": "Ali"}, "Ali"),
        ({"target_user_discord_id": "123456789012345678"}, "123456789012345678"),
        ({"target_user_nickname": "Ali", "target_user_discord_id": "1234"}, "Ali"),
        ({"target_user": "Alice", "target_user_nickname": "Ali"}, "Alice"),
        ({"target_user": "  ", "target_user_nickname": "Ali"}, "Ali"),
        ({"target_user": None, "target_user_nickname": " Ali "}, "Ali"),
        ({"target_user": "", "target_user_discord_id": "1234"}, "1234"),
        ({"target_user_nickname": " ", "target_user_discord_id": "1234"}, "1234"),
        ({"target_user_nickname": None, "target_user_discord_id": "1234"}, "1234"),
        ({"target_user": "", "target_user_nickname": "", "target_user_discord_id": ""}, None),
        (
            {"target_user": "A", "target_user_nickname": "B", "target_user_discord_id": "1"},
            "A",
        ),
    ],
)
def test_target_user(arguments: dict[str, Any], expected: str | None) -> None:
    assert accepted(valid(**arguments)).target_user == expected


@pytest.mark.parametrize("name", ["target_user", "target_user_nickname", "target_user_discord_id"])
@pytest.mark.parametrize("value", [1, 123456789012345678, True, 1.5, ["Alice"], {"n": "A"}])
def test_target_user_arguments_must_be_strings(name: str, value: object) -> None:
    assert name in rejected(valid(**{name: value})).message


@pytest.mark.parametrize("name", ["target_user_nickname", "target_user_discord_id"])
def test_legacy_names_are_type_checked_even_when_target_user_is_given(name: str) -> None:
    assert name in rejected(valid(target_user="Alice", **{name: 42})).message


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
        lambda children: st.lists(children) | st.dictionaries(st.text(), children),
        max_leaves=10,
    )
)
def test_any_json_value_gives_an_answer(raw: object) -> None:
    result = parse_update_arguments(raw)
    if isinstance(result, Rejection):
        assert result.status is MemoryStatus.INVALID_ARGS
    else:
        assert 0 < result.memory_id <= MAX_MEMORY_ID


@given(st.integers(min_value=1, max_value=MAX_MEMORY_ID), st.text())
def test_every_valid_id_and_content_is_accepted(memory_id: int, content: str) -> None:
    assert accepted({"memory_id": memory_id, "memory_content": content}) == UpdateArguments(
        memory_id=memory_id, content=content, target_user=None
    )


def rejection(result: object, status: MemoryStatus) -> Rejection:
    assert isinstance(result, Rejection), result
    assert result.status is status
    assert result.message
    return result


# Steps 2 and 3: server state and feature flag.


def test_a_good_server_state_passes() -> None:
    assert check_update_server_state(state(), context()) is None


def test_a_dm_is_a_server_keyed_by_the_triggerer() -> None:
    assert (
        check_update_server_state(state(server_disc_id=TRIGGERER_ID), context(guild_id=None))
        is None
    )


@pytest.mark.parametrize(
    "server_state",
    [
        None,  # server or persona missing
        state(persona_server_id=4),  # the persona belongs to another server
        state(server_disc_id=OTHER_GUILD_ID),  # loaded for another server
        state(persona_id=8),  # loaded for another persona
        state(persona_server_id=4, self_teaching_enabled=False),  # internal error comes first
    ],
)
def test_bad_server_state_is_an_internal_error(server_state: ServerState | None) -> None:
    result = rejection(
        check_update_server_state(server_state, context()), MemoryStatus.INTERNAL_ERROR
    )
    assert OTHER_GUILD_ID not in result.message


def test_self_teaching_off_is_disabled() -> None:
    rejection(
        check_update_server_state(state(self_teaching_enabled=False), context()),
        MemoryStatus.DISABLED,
    )


def test_personal_memories_off_does_not_disable_the_tool() -> None:
    assert check_update_server_state(state(personal_memories_enabled=False), context()) is None


# Step 5: the resolved target.


def test_ambiguity_offers_the_candidates() -> None:
    candidates = ("Alex (@alex1)", "Alex (@alex2)", "Alexa")
    result = rejection(
        check_update_target(AmbiguousUser(candidates), bot_user_id=BOT_ID),
        MemoryStatus.AMBIGUOUS_USER,
    )
    assert result.data == ResultData(candidates=candidates)
    assert all(candidate in result.message for candidate in candidates)


def test_nobody_is_user_not_found() -> None:
    result = rejection(
        check_update_target(NoSuchUser(), bot_user_id=BOT_ID), MemoryStatus.USER_NOT_FOUND
    )
    assert result.data == ResultData()


@pytest.mark.parametrize(
    "bridge",
    [
        ResolvedUser(user_id=MATRIX_ID, label="alice", via="matrix"),
        ResolvedUser(user_id=MATRIX_ID, label="alice", via="participant"),
        ResolvedUser(user_id=MATRIX_ID, label="alice", via="matrix", is_bot=True),
    ],
)
def test_a_bridge_user_is_out_of_scope(bridge: ResolvedUser) -> None:
    result = rejection(check_update_target(bridge, bot_user_id=BOT_ID), MemoryStatus.INVALID_SCOPE)
    assert "without target_user" in result.message


@pytest.mark.parametrize(
    "bot",
    [
        ResolvedUser(user_id=BOT_ID, label="Tomori", via="mention"),  # the bot itself
        ResolvedUser(user_id=BOT_ID, label="Tomori", is_bot=True),
        ResolvedUser(user_id=ALICE_ID, label="Other bot", is_bot=True, via="directory"),
    ],
)
def test_bots_are_invalid_targets(bot: ResolvedUser) -> None:
    rejection(check_update_target(bot, bot_user_id=BOT_ID), MemoryStatus.INVALID_TARGET)


def test_a_person_is_the_target() -> None:
    assert check_update_target(ALICE, bot_user_id=BOT_ID) is ALICE


# Steps 5 (end) and 7: the personal path.


def personal_scope(
    *,
    user: StoredUser | None = ALICE_ROW,
    target: ResolvedUser = ALICE,
    call: ToolCallContext | None = None,
    directory: Sequence[DirectoryMember] = (DirectoryMember(ALICE_ID, "alice"),),
    is_delete: bool = False,
) -> Rejection | None:
    return check_update_owner(
        target, user, context=call or context(), directory=directory, is_delete=is_delete
    )


def test_a_current_member_passes() -> None:
    assert personal_scope() is None


@pytest.mark.parametrize("is_delete", [False, True])
def test_a_target_never_stored_is_user_not_found(is_delete: bool) -> None:
    result = rejection(personal_scope(user=None, is_delete=is_delete), MemoryStatus.USER_NOT_FOUND)
    assert "Alice (@alice)" in result.message


@pytest.mark.parametrize(
    ("participants", "directory", "allowed"),
    [
        ((), (DirectoryMember(ALICE_ID, "alice"),), True),
        ((Participant(user_id=ALICE_ID, display_label="Alice"),), (), True),
        ((Participant(user_id=ALICE_ID, display_label="Alice", is_member=True),), (), True),
        ((Participant(user_id=ALICE_ID, display_label="Alice", is_member=False),), (), False),
        (
            (Participant(user_id=ALICE_ID, display_label="Alice", is_member=False),),
            (DirectoryMember(ALICE_ID, "alice"),),
            True,
        ),
        ((), (), False),
        ((), (DirectoryMember(TRIGGERER_ID, "someone"),), False),
    ],
)
def test_in_a_guild_the_target_must_be_a_current_member(
    participants: tuple[Participant, ...],
    directory: tuple[DirectoryMember, ...],
    allowed: bool,
) -> None:
    for is_delete in (False, True):
        result = personal_scope(
            call=context(participants=participants), directory=directory, is_delete=is_delete
        )
        if allowed:
            assert result is None
        else:
            rejection(result, MemoryStatus.INVALID_SCOPE)


def test_in_a_dm_the_target_must_be_the_triggerer() -> None:
    dm = context(guild_id=None, participants=[Participant(user_id=ALICE_ID, display_label="A")])
    triggerer = ResolvedUser(user_id=TRIGGERER_ID, label="Me")
    me = StoredUser(user_id=12, user_disc_id=TRIGGERER_ID)
    assert personal_scope(target=triggerer, user=me, call=dm, directory=()) is None
    # Another person, even one in the conversation or the directory, is out of scope.
    rejection(
        personal_scope(call=dm, directory=(DirectoryMember(ALICE_ID, "alice"),)),
        MemoryStatus.INVALID_SCOPE,
    )
    rejection(personal_scope(call=dm, is_delete=True), MemoryStatus.INVALID_SCOPE)


@pytest.mark.parametrize(
    ("privacy_level", "is_delete", "status"),
    [
        (0, False, None),
        (0, True, None),
        (1, False, MemoryStatus.PRIVACY_RESTRICTED),
        (2, False, MemoryStatus.PRIVACY_RESTRICTED),
        (1, True, None),  # deleting is always allowed
        (2, True, None),
        (3, False, MemoryStatus.PRIVACY_RESTRICTED),  # unknown levels err on privacy
    ],
)
def test_privacy_restricts_updates_only(
    privacy_level: int, is_delete: bool, status: MemoryStatus | None
) -> None:
    user = replace(ALICE_ROW, privacy_level=privacy_level)
    result = personal_scope(user=user, is_delete=is_delete)
    if status is None:
        assert result is None
    else:
        rejection(result, status)


def test_scope_is_checked_before_privacy() -> None:
    user = replace(ALICE_ROW, privacy_level=2)
    rejection(personal_scope(user=user, directory=()), MemoryStatus.INVALID_SCOPE)


# Step 6: the write.


def test_server_path_write() -> None:
    args = UpdateArguments(memory_id=24, content=" x ", target_user=None)
    assert plan_update(args, "x", state(), None, context=context()) == MemoryWrite(
        scope="server_wide", memory_id=24, content="x", server_id=3, persona_lineage_id=42
    )


def test_empty_content_deletes() -> None:
    args = UpdateArguments(memory_id=24, content="  ", target_user=None)
    write = plan_update(args, "", state(), None, context=context())
    assert write.content is None
    assert write.is_delete


def test_personal_path_write() -> None:
    args = UpdateArguments(memory_id=24, content="likes tea", target_user="alice")
    write = plan_update(args, "likes tea", state(), (ALICE, ALICE_ROW), context=context())
    assert write == MemoryWrite(
        scope="target_user",
        memory_id=24,
        content="likes tea",
        server_id=3,
        persona_lineage_id=42,
        owner_user_id=11,
        owner_disc_id=ALICE_ID,
        owner_label="Alice (@alice)",
    )
    assert not write.is_delete
    assert plan_update(args, "", state(), (ALICE, ALICE_ROW), context=context()).content is None


# Step 6: the edit policy (docs/behaviour.md, "The edit policy") travels with the write.

SERVER_ARGS = UpdateArguments(memory_id=24, content="x", target_user=None)
PERSONAL_ARGS = UpdateArguments(memory_id=24, content="x", target_user="alice")


@pytest.mark.parametrize(
    ("policy", "where", "manager", "only_own"),
    [
        ("anyone", "guild", False, False),
        ("anyone", "dm", False, False),
        ("teacher_or_manager", "guild", False, True),
        ("teacher_or_manager", "guild", True, False),
        # In a DM the triggerer manages its own DM, whatever the bot said.
        ("teacher_or_manager", "dm", False, False),
    ],
)
@pytest.mark.parametrize("personal", [False, True], ids=["server", "personal"])
def test_the_edit_policy_restricts_a_write_to_own_memories(
    policy: MemoryEditPolicy, where: str, manager: bool, only_own: bool, personal: bool
) -> None:
    call_context = context(
        guild_id=GUILD_ID if where == "guild" else None, triggerer_is_manager=manager
    )
    server_state = state(
        memory_edit_policy=policy,
        server_disc_id=GUILD_ID if where == "guild" else TRIGGERER_ID,
    )
    args, owner = (PERSONAL_ARGS, (ALICE, ALICE_ROW)) if personal else (SERVER_ARGS, None)

    write = plan_update(args, "x", server_state, owner, context=call_context)

    assert write.only_own is only_own
    assert write.scope == ("target_user" if personal else "server_wide")


def test_a_delete_is_restricted_as_an_update_is() -> None:
    restricted = state(memory_edit_policy="teacher_or_manager")
    assert plan_update(SERVER_ARGS, "", restricted, None, context=context()).only_own


# Step 8: no row.

SERVER_WRITE = MemoryWrite(
    scope="server_wide", memory_id=24, content="x", server_id=3, persona_lineage_id=42
)
PERSONAL_WRITE = plan_update(
    UpdateArguments(memory_id=24, content="x", target_user="alice"),
    "x",
    state(),
    (ALICE, ALICE_ROW),
    context=context(),
)


def test_server_memory_not_found() -> None:
    result = rejection(not_found(SERVER_WRITE, in_other_scope=False), MemoryStatus.NOT_FOUND)
    assert "24" in result.message
    assert "personal" not in result.message
    assert "target_user" not in result.message
    assert result.data == ResultData(scope="server_wide", memory_id=24)


def test_server_memory_not_found_but_a_personal_one_is_in_reach() -> None:
    result = rejection(not_found(SERVER_WRITE, in_other_scope=True), MemoryStatus.NOT_FOUND)
    assert "personal memory" in result.message
    assert "with target_user" in result.message
    assert result.data == ResultData(scope="server_wide", memory_id=24)


def test_personal_memory_not_found() -> None:
    result = rejection(not_found(PERSONAL_WRITE, in_other_scope=False), MemoryStatus.NOT_FOUND)
    assert "24" in result.message
    assert "server memory" not in result.message
    assert "without target_user" not in result.message
    assert result.data == ResultData(
        scope="target_user", memory_id=24, target_user="Alice (@alice)"
    )


def test_personal_memory_not_found_but_a_server_one_is_in_reach() -> None:
    result = rejection(not_found(PERSONAL_WRITE, in_other_scope=True), MemoryStatus.NOT_FOUND)
    assert "server memory" in result.message
    assert "without target_user" in result.message


# Step 8: a memory in scope that the edit policy keeps from the triggerer.


def test_a_forbidden_server_memory_says_who_may_change_it() -> None:
    write = replace(SERVER_WRITE, content="a secret new text", only_own=True)
    result = rejection(forbidden(write), MemoryStatus.FORBIDDEN)
    assert not result.status.success
    assert "ID:24" in result.message
    assert "taught it" in result.message
    assert "manages this server" in result.message
    assert "secret" not in result.message
    assert result.data == ResultData(scope="server_wide", memory_id=24)


def test_a_forbidden_personal_memory_says_who_may_change_it() -> None:
    write = replace(PERSONAL_WRITE, content="a secret new text", only_own=True)
    result = rejection(forbidden(write), MemoryStatus.FORBIDDEN)
    assert "ID:24" in result.message
    assert 'only by "Alice (@alice)"' in result.message
    assert "manages this server" in result.message
    assert "secret" not in result.message
    assert result.data == ResultData(
        scope="target_user", memory_id=24, target_user="Alice (@alice)"
    )


# Committed.

WRITTEN = WrittenMemory(revision_id=5, content_before="liked coffee", persona_lineage_id=42)


def test_server_update_succeeds() -> None:
    status, message, data = result_of_update(SERVER_WRITE, WRITTEN)
    assert status is MemoryStatus.UPDATED
    assert status.success
    assert "24" in message
    assert data == ResultData(scope="server_wide", memory_id=24, content_saved="x")


def test_server_delete_succeeds() -> None:
    status, message, data = result_of_update(replace(SERVER_WRITE, content=None), WRITTEN)
    assert status is MemoryStatus.DELETED
    assert "deleted" in message
    assert data == ResultData(scope="server_wide", memory_id=24, content_deleted="liked coffee")


def test_personal_update_succeeds() -> None:
    status, message, data = result_of_update(PERSONAL_WRITE, WRITTEN)
    assert status is MemoryStatus.UPDATED
    assert "Alice (@alice)" in message
    assert data == ResultData(
        scope="target_user", memory_id=24, content_saved="x", target_user="Alice (@alice)"
    )


def test_personal_delete_succeeds() -> None:
    written = replace(WRITTEN, persona_lineage_id=0)  # a global personal memory
    status, _, data = result_of_update(replace(PERSONAL_WRITE, content=None), written)
    assert status is MemoryStatus.DELETED
    assert data == ResultData(
        scope="target_user",
        memory_id=24,
        content_deleted="liked coffee",
        target_user="Alice (@alice)",
    )
