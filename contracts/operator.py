"""`operator.*`: what an operator did by hand, for the audit stream: to the dead letters, and
a revert of many memories at once.

A restore is a memory change and has its own event (`memory.restored`); replays and purges
change no memory, and are recorded by these. A revert is many restores (each its own
`memory.restored`), and one `operator.memories_reverted` saying why and by which filter.
`actor` names who did it: `console:<name>` for the operator console.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, NonNegativeInt

from contracts.envelope import Event

__all__ = [
    "MEMORIES_REVERTED_ROUTING_KEY",
    "DeadLettersPurged",
    "DeadLettersReplayed",
    "MemoriesReverted",
    "OperatorAction",
    "ReplayedCall",
    "RevisionFilter",
    "operator_routing_key",
]


def operator_routing_key(action: str) -> str:
    """`operator.dead_letters.<replayed|purged>`: bound by the audit stream (`operator.#`) only."""
    return f"operator.dead_letters.{action}"


class ReplayedCall(BaseModel):
    """One dead letter sent back to the tool-call exchange."""

    model_config = ConfigDict(strict=True, frozen=True, extra="ignore")

    event_id: str | None
    tool_call_id: str | None
    routing_key: str


class OperatorAction(Event):
    """Common fields; the concrete event types below fix `event_type`."""

    ACTION: ClassVar[str]

    actor: str
    queue: str


class DeadLettersReplayed(OperatorAction):
    EVENT_TYPE: ClassVar[str] = "operator.dead_letters_replayed"
    ACTION: ClassVar[str] = "replayed"

    event_type: Literal["operator.dead_letters_replayed"] = "operator.dead_letters_replayed"
    replayed: tuple[ReplayedCall, ...]
    # Those the broker did not confirm: they stayed dead-lettered.
    failed: NonNegativeInt = 0
    # The operator's justification (`--reason`); None for a replay by id without one, and in
    # records older than it.
    reason: str | None = None
    # The criteria the letters were chosen by (error, tool, guild, since); empty for `--id`
    # and `--all`.
    filter: dict[str, str] = Field(default_factory=dict)
    # How many went back (confirmed): `len(replayed)`, said where a reader looks first.
    count: NonNegativeInt = 0


class DeadLettersPurged(OperatorAction):
    EVENT_TYPE: ClassVar[str] = "operator.dead_letters_purged"
    ACTION: ClassVar[str] = "purged"

    event_type: Literal["operator.dead_letters_purged"] = "operator.dead_letters_purged"
    # How many were removed: the count of a purge by filter too.
    removed: NonNegativeInt
    # The criteria of a purge by filter; empty when the whole queue was purged.
    filter: dict[str, str] = Field(default_factory=dict)


# Beside the dead letters' keys under `operator.`: bound by the audit stream (`#`) only.
MEMORIES_REVERTED_ROUTING_KEY = "operator.memories.reverted"


class RevisionFilter(BaseModel):
    """Which revisions: those matching every field given (None: any). `ltm memory changes`
    lists them; a revert undoes them, and its event keeps the filter."""

    model_config = ConfigDict(strict=True, frozen=True, extra="ignore")

    actor_disc_id: str | None = None
    guild_id: str | None = None
    channel_id: str | None = None
    tool_call_id: str | None = None
    since: AwareDatetime | None = None
    until: AwareDatetime | None = None


class MemoriesReverted(Event):
    """An operator put back the memories the revisions matching `filter` had changed.

    `operator` is the actor of the revert's `restored` revisions (`operator:<name>`,
    `console:<name>`); the counts exclude memories that already were as they should be.
    """

    EVENT_TYPE: ClassVar[str] = "operator.memories_reverted"

    event_type: Literal["operator.memories_reverted"] = "operator.memories_reverted"
    # The revert's own id, shared by its revisions and their events (`revert:<uuid>`).
    tool_call_id: str
    operator: str
    reason: str
    filter: RevisionFilter
    reverted: NonNegativeInt
    # Changed since by someone else, left as they are.
    skipped: NonNegativeInt
