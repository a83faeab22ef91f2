"""`operator.*`: what an operator did by hand to the dead letters, for the audit stream.

A restore is a memory change and has its own event (`memory.restored`); replays and purges
change no memory, and are recorded by these. `actor` names who did it: `console:<name>` for
the operator console.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, NonNegativeInt

from contracts.envelope import Event

__all__ = [
    "DeadLettersPurged",
    "DeadLettersReplayed",
    "OperatorAction",
    "ReplayedCall",
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


class DeadLettersPurged(OperatorAction):
    EVENT_TYPE: ClassVar[str] = "operator.dead_letters_purged"
    ACTION: ClassVar[str] = "purged"

    event_type: Literal["operator.dead_letters_purged"] = "operator.dead_letters_purged"
    removed: NonNegativeInt
