"""The facts the worker's unit tests share: a guild, its persona's state, a call's context."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from contracts import Participant, ToolCallContext
from worker.core.model import ResolvedUser, ServerState, StoredUser

__all__ = [
    "ALICE",
    "ALICE_ID",
    "ALICE_ROW",
    "BOT_ID",
    "CHANNEL_ID",
    "GUILD_ID",
    "MATRIX_ID",
    "OTHER_GUILD_ID",
    "TRIGGERER_ID",
    "context",
    "state",
]

GUILD_ID = "900000000000000001"
OTHER_GUILD_ID = "900000000000000002"
CHANNEL_ID = "900000000000000010"
TRIGGERER_ID = "100000000000000001"
ALICE_ID = "100000000000000002"
BOT_ID = "100000000000000099"
MATRIX_ID = "@alice:matrix.org"


def context(
    *,
    guild_id: str | None = GUILD_ID,
    participants: Sequence[Participant] = (),
    triggerer_is_manager: bool = False,
    seen: dict[str, int] | None = None,
) -> ToolCallContext:
    return ToolCallContext(
        guild_id=guild_id,
        channel_id=CHANNEL_ID,
        triggerer_id=TRIGGERER_ID,
        bot_user_id=BOT_ID,
        persona_id=7,
        shard_id=0,
        participants=tuple(participants),
        triggerer_is_manager=triggerer_is_manager,
        seen=seen,
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
