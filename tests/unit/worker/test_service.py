"""The order of the pipeline's steps: the real `process_tool_call`, the database's answers
given (docs/behaviour.md, update steps: the first step that fails decides the result)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from pydantic import JsonValue

from contracts import (
    UPDATE_LONG_TERM_MEMORY,
    MemoryStatus,
    Participant,
    ToolCallRequested,
    encode_event,
)
from tests.unit.worker.given import ALICE_ID, ALICE_ROW, BOT_ID, MATRIX_ID, context, state
from worker.adapters.database import Answer, Claim, PlannedWrite, ToolCallTransaction
from worker.adapters.outbox import OutboxRow, OutgoingEvent, outbox_rows
from worker.core.model import (
    DirectoryMember,
    ForbiddenWrite,
    MemoryWrite,
    ServerState,
    StoredUser,
    WrittenMemory,
)
from worker.service import process_tool_call

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
        self,
        server_state: ServerState | None,
        *,
        row_exists: bool,
        in_other_scope: bool,
        forbidden: bool = False,
    ) -> None:
        self.server_state = server_state
        self.row_exists = row_exists
        self.other_scope = in_other_scope
        self.forbidden = forbidden

    async def claim(self, calls: Sequence[ToolCallRequested]) -> list[Claim]:
        return [Claim(stored=None, state=self.server_state) for _ in calls]

    async def load_directory(self, server_id: int) -> list[DirectoryMember]:
        return list(DIRECTORY)

    async def load_user(self, user_disc_id: str, *, server_id: int) -> StoredUser | None:
        return USERS.get(user_disc_id)

    async def apply(
        self, writes: Sequence[PlannedWrite]
    ) -> list[WrittenMemory | ForbiddenWrite | None]:
        if self.forbidden:
            return [ForbiddenWrite() for _ in writes]
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
    forbidden: bool = False,
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
        forbidden=forbidden,
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
        # Blank deletes; text that shows nothing is no memory, and no delete either.
        (call(content="\u200b", target="nobody"), {}, MemoryStatus.INVALID_CONTENT),
        (call(content=" \u200b ", target="Private"), {}, MemoryStatus.INVALID_CONTENT),
        (call(target="alex"), {}, MemoryStatus.AMBIGUOUS_USER),
        (call(target="nobody"), {}, MemoryStatus.USER_NOT_FOUND),
        # Resolved, but never stored in `users`.
        (call(target="Alex (@alex2)"), {}, MemoryStatus.USER_NOT_FOUND),
        (call(target=MATRIX_ID), {}, MemoryStatus.INVALID_SCOPE),
        (call(target=f"<@{BOT_ID}>"), {}, MemoryStatus.INVALID_TARGET),
        (call(target="Private"), {}, MemoryStatus.PRIVACY_RESTRICTED),
        (call(), {"row_exists": False}, MemoryStatus.NOT_FOUND),
        (call(target="  "), {"row_exists": False, "in_other_scope": True}, MemoryStatus.NOT_FOUND),
        # The edit policy is checked by the write, after every step before it.
        (call(), {"forbidden": True}, MemoryStatus.FORBIDDEN),
        (call(content="", target="alice"), {"forbidden": True}, MemoryStatus.FORBIDDEN),
        (call(target="Private"), {"forbidden": True}, MemoryStatus.PRIVACY_RESTRICTED),
        (call(), {**OFF, "forbidden": True}, MemoryStatus.DISABLED),
    ],
)
async def test_the_first_failing_step_decides(
    arguments: JsonValue, facts: dict[str, Any], status: MemoryStatus
) -> None:
    assert await decide(arguments, **facts) is status
