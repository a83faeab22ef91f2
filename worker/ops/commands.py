"""The operator commands' arguments, typed: one frozen value per command, built from the
command line by the entry points (`ltm.arguments`) and taken by the printing in `worker.ops`."""

from __future__ import annotations

from dataclasses import dataclass

from operators.audit_stream import StreamStart

__all__ = [
    "CallTool",
    "ListDeadLetters",
    "ListMemories",
    "OperatorCommand",
    "PrintBrokerDefinitions",
    "PurgeDeadLetters",
    "ReplayDeadLetters",
    "RestoreRevision",
    "ShowHistory",
    "TailAudit",
]


@dataclass(frozen=True, slots=True)
class CallTool:
    """`ltm call FILE`: the file's bytes, as read."""

    body: bytes
    timeout: float = 30.0
    as_json: bool = False


@dataclass(frozen=True, slots=True)
class ListDeadLetters:
    """`ltm dlq list`."""

    as_json: bool = False


@dataclass(frozen=True, slots=True)
class ReplayDeadLetters:
    """`ltm dlq replay --id EVENT_ID | --all`: `event_id` None replays every dead letter."""

    event_id: str | None
    as_json: bool = False


@dataclass(frozen=True, slots=True)
class PurgeDeadLetters:
    """`ltm dlq purge`: without `yes`, it asks first."""

    yes: bool = False
    as_json: bool = False


@dataclass(frozen=True, slots=True)
class TailAudit:
    """`ltm audit tail`."""

    start: StreamStart = "first"
    follow: bool = False
    as_json: bool = False


@dataclass(frozen=True, slots=True)
class ShowHistory:
    """`ltm audit history MEMORY_ID`."""

    memory_id: int
    as_json: bool = False


@dataclass(frozen=True, slots=True)
class RestoreRevision:
    """`ltm memory restore REVISION`, recorded as made by `actor`."""

    revision_id: int
    actor: str = "cli"
    as_json: bool = False


@dataclass(frozen=True, slots=True)
class ListMemories:
    """`ltm memory list`: the server's key (a guild, or the user of a DM), the persona, and
    the people whose personal memories to add."""

    guild: str
    persona_id: int
    user_ids: tuple[str, ...] = ()
    as_json: bool = False


@dataclass(frozen=True, slots=True)
class PrintBrokerDefinitions:
    """`ltm broker-definitions`: `vhost` None takes the one `LTM_AMQP_URL` names."""

    vhost: str | None = None


OperatorCommand = (
    CallTool
    | ListDeadLetters
    | ReplayDeadLetters
    | PurgeDeadLetters
    | TailAudit
    | ShowHistory
    | RestoreRevision
    | ListMemories
    | PrintBrokerDefinitions
)
