"""The decisions between facts (steps 2, 3 and 5 to 8), and the order the pipeline takes them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest
from pydantic import JsonValue

from contracts import (
    UPDATE_LONG_TERM_MEMORY,
    MemoryStatus,
    Participant,
    ResultData,
    ToolCallContext,
    ToolCallRequested,
    encode_event,
)
from worker.adapters.database import Answer, Claim, PlannedWrite, ToolCallTransaction
from worker.adapters.outbox import OutboxRow, OutgoingEvent, outbox_rows
from worker.core.decide import (
    check_personal_scope,
    check_server_state,
    check_target,
    not_found,
    plan_write,
    success,
)
from worker.core.model import (
    AmbiguousUser,
    DirectoryMember,
    MemoryArguments,
    MemoryWrite,
    NoSuchUser,
    Rejection,
    ResolvedUser,
    ServerState,
    StoredUser,
    WrittenMemory,
)
from worker.service import process_tool_call

GUILD_ID = "900000000000000001"
OTHER_GUILD_ID = "900000000000000002"
CHANNEL_ID = "900000000000000010"
TRIGGERER_ID = "100000000000000001"
ALICE_ID = "100000000000000002"
BOT_ID = "100000000000000099"
MATRIX_ID = "@alice:matrix.org"


def context(
    *, guild_id: str | None = GUILD_ID, participants: Sequence[Participant] = ()
) -> ToolCallContext:
    return ToolCallContext(
        guild_id=guild_id,
        channel_id=CHANNEL_ID,
        triggerer_id=TRIGGERER_ID,
        bot_user_id=BOT_ID,
        persona_id=7,
        shard_id=0,
        participants=tuple(participants),
    )


def state(**changes: Any) -> ServerState:
    base = ServerState(
        server_id=3,
        server_disc_id=GUILD_ID,
        persona_id=7,
        persona_server_id=3,
        persona_lineage_id=42,
        persona_nickname="Tomori",
    )
    return replace(base, **changes)


ALICE = ResolvedUser(user_id=ALICE_ID, label="Alice (@alice)", via="participant")
ALICE_ROW = StoredUser(user_id=11, user_disc_id=ALICE_ID)


def rejection(result: object, status: MemoryStatus) -> Rejection:
    assert isinstance(result, Rejection), result
    assert result.status is status
    assert result.message
    return result


# Steps 2 and 3: server state and feature flag.


def test_a_good_server_state_passes() -> None:
    assert check_server_state(state(), context()) is None


def test_a_dm_is_a_server_keyed_by_the_triggerer() -> None:
    assert check_server_state(state(server_disc_id=TRIGGERER_ID), context(guild_id=None)) is None


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
    result = rejection(check_server_state(server_state, context()), MemoryStatus.INTERNAL_ERROR)
    assert OTHER_GUILD_ID not in result.message


def test_self_teaching_off_is_disabled() -> None:
    rejection(
        check_server_state(state(self_teaching_enabled=False), context()), MemoryStatus.DISABLED
    )


def test_personal_memories_off_does_not_disable_the_tool() -> None:
    assert check_server_state(state(personal_memories_enabled=False), context()) is None


# Step 5: the resolved target.


def test_ambiguity_offers_the_candidates() -> None:
    candidates = ("Alex (@alex1)", "Alex (@alex2)", "Alexa")
    result = rejection(
        check_target(AmbiguousUser(candidates), bot_user_id=BOT_ID), MemoryStatus.AMBIGUOUS_USER
    )
    assert result.data == ResultData(candidates=candidates)
    assert all(candidate in result.message for candidate in candidates)


def test_nobody_is_user_not_found() -> None:
    result = rejection(check_target(NoSuchUser(), bot_user_id=BOT_ID), MemoryStatus.USER_NOT_FOUND)
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
    result = rejection(check_target(bridge, bot_user_id=BOT_ID), MemoryStatus.INVALID_SCOPE)
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
    rejection(check_target(bot, bot_user_id=BOT_ID), MemoryStatus.INVALID_TARGET)


def test_a_person_is_the_target() -> None:
    assert check_target(ALICE, bot_user_id=BOT_ID) is ALICE


# Steps 5 (end) and 7: the personal path.


def personal_scope(
    *,
    user: StoredUser | None = ALICE_ROW,
    target: ResolvedUser = ALICE,
    call: ToolCallContext | None = None,
    directory: Sequence[DirectoryMember] = (DirectoryMember(ALICE_ID, "alice"),),
    is_delete: bool = False,
) -> Rejection | None:
    return check_personal_scope(
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
    args = MemoryArguments(memory_id=24, content=" x ", target_user=None)
    assert plan_write(args, "x", state(), None) == MemoryWrite(
        scope="server_wide", memory_id=24, content="x", server_id=3, persona_lineage_id=42
    )


def test_empty_content_deletes() -> None:
    args = MemoryArguments(memory_id=24, content="  ", target_user=None)
    write = plan_write(args, "", state(), None)
    assert write.content is None
    assert write.is_delete


def test_personal_path_write() -> None:
    args = MemoryArguments(memory_id=24, content="likes tea", target_user="alice")
    write = plan_write(args, "likes tea", state(), (ALICE, ALICE_ROW))
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
    assert plan_write(args, "", state(), (ALICE, ALICE_ROW)).content is None


# Step 8: no row.

SERVER_WRITE = MemoryWrite(
    scope="server_wide", memory_id=24, content="x", server_id=3, persona_lineage_id=42
)
PERSONAL_WRITE = plan_write(
    MemoryArguments(memory_id=24, content="x", target_user="alice"),
    "x",
    state(),
    (ALICE, ALICE_ROW),
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


# Committed.

WRITTEN = WrittenMemory(revision_id=5, content_before="liked coffee", persona_lineage_id=42)


def test_server_update_succeeds() -> None:
    status, message, data = success(SERVER_WRITE, WRITTEN)
    assert status is MemoryStatus.UPDATED
    assert status.success
    assert "24" in message
    assert data == ResultData(scope="server_wide", memory_id=24, content_saved="x")


def test_server_delete_succeeds() -> None:
    status, message, data = success(replace(SERVER_WRITE, content=None), WRITTEN)
    assert status is MemoryStatus.DELETED
    assert "deleted" in message
    assert data == ResultData(scope="server_wide", memory_id=24, content_deleted="liked coffee")


def test_personal_update_succeeds() -> None:
    status, message, data = success(PERSONAL_WRITE, WRITTEN)
    assert status is MemoryStatus.UPDATED
    assert "Alice (@alice)" in message
    assert data == ResultData(
        scope="target_user", memory_id=24, content_saved="x", target_user="Alice (@alice)"
    )


def test_personal_delete_succeeds() -> None:
    written = replace(WRITTEN, persona_lineage_id=0)  # a global personal memory
    status, _, data = success(replace(PERSONAL_WRITE, content=None), written)
    assert status is MemoryStatus.DELETED
    assert data == ResultData(
        scope="target_user",
        memory_id=24,
        content_deleted="liked coffee",
        target_user="Alice (@alice)",
    )


# The order of the steps: the real pipeline (`process_tool_call`), the database's answers given.

DIRECTORY = (
    DirectoryMember(ALICE_ID, "alice", "Alice"),
    DirectoryMember("100000000000000003", "alex1", "Alex"),
    DirectoryMember("100000000000000004", "alex2", "Alex"),
    DirectoryMember(BOT_ID, "tomori", "Tomori", is_bot=True),
    DirectoryMember("100000000000000005", "private", "Private"),
)
USERS = {
    ALICE_ID: ALICE_ROW,
    "100000000000000005": StoredUser(
        user_id=13, user_disc_id="100000000000000005", privacy_level=1
    ),
}


class GivenFacts(ToolCallTransaction):
    """The reads of a transaction answered from fixed facts, the writes taken as done.

    No connection: every method the pipeline calls is overridden, so a new read would fail
    here instead of reaching for a database.
    """

    def __init__(
        self, server_state: ServerState | None, *, row_exists: bool, in_other_scope: bool
    ) -> None:
        self.server_state = server_state
        self.row_exists = row_exists
        self.other_scope = in_other_scope

    async def claim(self, calls: Sequence[ToolCallRequested]) -> list[Claim]:
        return [Claim(stored=None, state=self.server_state) for _ in calls]

    async def load_directory(self, server_id: int) -> list[DirectoryMember]:
        return list(DIRECTORY)

    async def load_user(self, user_disc_id: str, *, server_id: int) -> StoredUser | None:
        return USERS.get(user_disc_id)

    async def apply(self, writes: Sequence[PlannedWrite]) -> list[WrittenMemory | None]:
        written = WrittenMemory(revision_id=1, content_before="old", persona_lineage_id=42)
        return [written if self.row_exists else None for _ in writes]

    async def in_other_scope(self, write: MemoryWrite, *, participant_ids: Sequence[str]) -> bool:
        return self.other_scope

    async def finish(
        self, answers: Sequence[Answer], events: Sequence[OutgoingEvent]
    ) -> list[OutboxRow]:
        return outbox_rows(events, [encode_event(outgoing.event) for outgoing in events])


async def decide(
    arguments: JsonValue,
    *,
    server_state: ServerState | None = None,
    row_exists: bool = True,
    in_other_scope: bool = False,
) -> MemoryStatus:
    """What the pipeline answers a call with these arguments, given these facts."""
    request = ToolCallRequested(
        tool_call_id="call_1",
        tool_name=UPDATE_LONG_TERM_MEMORY,
        arguments=arguments,
        context=context(participants=[Participant(user_id=MATRIX_ID, display_label="bridge")]),
    )
    facts = GivenFacts(
        state() if server_state is None else server_state,
        row_exists=row_exists,
        in_other_scope=in_other_scope,
    )
    processed = await process_tool_call(request, facts, max_memory_length=1000, reply_ttl_ms=1)
    return processed.result.status


def call(memory_id: JsonValue = 24, content: str = "x", target: str | None = None) -> JsonValue:
    arguments: dict[str, JsonValue] = {"memory_id": memory_id, "memory_content": content}
    return arguments if target is None else {**arguments, "target_user": target}


OFF = {"server_state": state(self_teaching_enabled=False)}
LONG = "x" * 1001


@pytest.mark.parametrize(
    ("arguments", "facts", "status"),
    [
        (call(), {}, MemoryStatus.UPDATED),
        (call(24.0, "  "), {}, MemoryStatus.DELETED),
        (call(target="alice"), {}, MemoryStatus.UPDATED),
        (call(content="", target="Private"), {}, MemoryStatus.DELETED),
        (call("24"), {}, MemoryStatus.INVALID_ARGS),
        (call(True), {}, MemoryStatus.INVALID_ARGS),
        (call(2**53), {}, MemoryStatus.INVALID_ARGS),
        (call(), {"server_state": state(persona_server_id=9)}, MemoryStatus.INTERNAL_ERROR),
        (call(), OFF, MemoryStatus.DISABLED),
        # Arguments come before the flag, the flag before the content.
        (call(0), OFF, MemoryStatus.INVALID_ARGS),
        (call(content=LONG), OFF, MemoryStatus.DISABLED),
        (call(content=LONG), {}, MemoryStatus.INVALID_CONTENT),
        # The content comes before the target user.
        (call(content=LONG, target="nobody"), {}, MemoryStatus.INVALID_CONTENT),
        (call(target="alex"), {}, MemoryStatus.AMBIGUOUS_USER),
        (call(target="nobody"), {}, MemoryStatus.USER_NOT_FOUND),
        # Resolved, but never stored in `users`.
        (call(target="Alex (@alex2)"), {}, MemoryStatus.USER_NOT_FOUND),
        (call(target=MATRIX_ID), {}, MemoryStatus.INVALID_SCOPE),
        (call(target=f"<@{BOT_ID}>"), {}, MemoryStatus.INVALID_TARGET),
        (call(target="Private"), {}, MemoryStatus.PRIVACY_RESTRICTED),
        (call(), {"row_exists": False}, MemoryStatus.NOT_FOUND),
        (call(target="  "), {"row_exists": False, "in_other_scope": True}, MemoryStatus.NOT_FOUND),
    ],
)
async def test_the_first_failing_step_decides(
    arguments: JsonValue, facts: dict[str, Any], status: MemoryStatus
) -> None:
    assert await decide(arguments, **facts) is status
