"""`data_request.*`, `subject.*` and `notice.retract`: what the bot remembers of a person, or of
a server, exported or erased on request.

A data request is a message of its own, never a tool the LLM is offered. It travels on the
tool-call exchange with the routing key `data_request`, to the worker's queue (its retries,
idempotency and dead-lettering are the tool calls'; the idempotency key is `request_id`), and
is answered with `data_request.completed` on the shard of its `context`. A done request leaves
a `subject.exported` or `subject.erased` audit event, which holds no memory text; an erasure
asks every gateway that posted a notice about an erased memory to take it back
(`notice.retract`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, ClassVar, Final, Literal, Self

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    NonNegativeInt,
    StringConstraints,
    field_serializer,
    model_validator,
)

from contracts.envelope import Event, rfc3339_utc
from contracts.ids import DiscordId

__all__ = [
    "DATA_REQUEST_ROUTING_KEY",
    "DataRequestCompleted",
    "DataRequestRequested",
    "ExportDocument",
    "ExportedMembership",
    "ExportedMemory",
    "ExportedRevision",
    "ExportedUser",
    "NoticeRetract",
    "Receipt",
    "RefusalReason",
    "RequestContext",
    "RequestKind",
    "RequestStatus",
    "RequestedBy",
    "RequesterKind",
    "Subject",
    "SubjectErased",
    "SubjectExported",
    "SubjectKind",
    "TaughtMemory",
    "retract_routing_key",
    "subject_routing_key",
]

# Bound to the worker's queue beside the tool names: a key no tool can have.
DATA_REQUEST_ROUTING_KEY: Final = "data_request"

RequestKind = Literal["export", "erase"]
SubjectKind = Literal["user", "guild"]
RequestStatus = Literal["done", "refused"]
# `user`: the subject asks about themselves; `server_owner`: for a guild subject (the bot has
# checked the ownership with Discord); `discord_deleted_user`: the account no longer exists;
# `bot_removed`: a gateway removed from a guild; `operator`: `ltm` or the console.
RequesterKind = Literal["user", "server_owner", "discord_deleted_user", "bot_removed", "operator"]
RefusalReason = Literal["not_the_subject", "guild_subject_by_user", "untrusted_publisher"]

RequestId = Annotated[str, StringConstraints(strict=True, min_length=1, max_length=200)]
RequesterId = Annotated[str, StringConstraints(strict=True, min_length=1, max_length=200)]
StatedReason = Annotated[str, StringConstraints(strict=True, max_length=1000)]


def subject_routing_key(action: Literal["exported", "erased"], subject_kind: SubjectKind) -> str:
    """`subject.<exported|erased>.<user|guild>`: bound by the audit stream."""
    return f"subject.{action}.{subject_kind}"


def retract_routing_key(shard_id: int) -> str:
    """`retract.shard.<n>`: bound to shard n's queue, whose gateway posted the notice."""
    return f"retract.shard.{shard_id}"


class _Part(BaseModel):
    """A part of a message: strict, frozen, unknown fields ignored (as the envelope's)."""

    model_config = ConfigDict(strict=True, frozen=True, extra="ignore")


class Subject(_Part):
    """Whose data: a user (`user_id`) or a server (`guild_id`), exactly one of them."""

    user_id: DiscordId | None = None
    guild_id: DiscordId | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        if (self.user_id is None) == (self.guild_id is None):
            raise ValueError("a subject is a user_id or a guild_id, exactly one")
        return self

    @property
    def kind(self) -> SubjectKind:
        return "user" if self.user_id is not None else "guild"

    @property
    def id(self) -> str:
        subject_id = self.user_id if self.user_id is not None else self.guild_id
        assert subject_id is not None
        return subject_id


class RequestedBy(_Part):
    """Who asked: `id` is a Discord id, or a name (`cli:<login>`, `console:<name>`, a gateway
    instance for `bot_removed`)."""

    kind: RequesterKind
    id: RequesterId


class RequestContext(_Part):
    """Where the answer goes: the shard's result queue, about this channel."""

    shard_id: NonNegativeInt
    channel_id: DiscordId


class Receipt(_Part):
    """What an erasure did, counted: exactly these fields."""

    memories_deleted: NonNegativeInt = 0
    revisions_redacted: NonNegativeInt = 0
    teachers_removed: NonNegativeInt = 0
    records_redacted: NonNegativeInt = 0
    outbox_rows_deleted: NonNegativeInt = 0
    dead_letters_removed: NonNegativeInt = 0
    notices_to_retract: NonNegativeInt = 0


class ExportedUser(_Part):
    user_id: DiscordId
    user_nickname: str | None
    privacy_level: int


class ExportedMembership(_Part):
    guild_id: DiscordId
    display_name: str | None
    global_name: str | None
    username: str


class ExportedRevision(_Part):
    revision_id: int
    action: str
    occurred_at: AwareDatetime
    content_before: str | None
    content_after: str | None
    actor_disc_id: str

    @field_serializer("occurred_at")
    def _rfc3339(self, value: datetime) -> str:
        return rfc3339_utc(value)


class ExportedMemory(_Part):
    memory_id: int
    persona_lineage_id: int
    content: str
    tags: tuple[str, ...]
    created_at: AwareDatetime
    updated_at: AwareDatetime
    revisions: tuple[ExportedRevision, ...]

    @field_serializer("created_at", "updated_at")
    def _rfc3339(self, value: datetime) -> str:
        return rfc3339_utc(value)


class TaughtMemory(_Part):
    guild_id: str
    memory_id: int
    content: str


class ExportDocument(_Part):
    """Everything the service holds about one user, and nothing about anyone else: another
    person named in a memory's text stays as written, but no other person's ids or rows."""

    schema_version: Literal[1] = 1
    user: ExportedUser | None
    guild_members: tuple[ExportedMembership, ...] = ()
    personal_memories: tuple[ExportedMemory, ...] = ()
    server_memories_taught: tuple[TaughtMemory, ...] = ()
    tool_calls_triggered: NonNegativeInt = 0


class DataRequestRequested(Event):
    """An export or an erasure, asked for by the subject, the server's owner or an operator."""

    EVENT_TYPE: ClassVar[str] = "data_request.requested"
    event_type: Literal["data_request.requested"] = "data_request.requested"

    request_id: RequestId
    kind: RequestKind
    subject: Subject
    requested_by: RequestedBy
    strict: bool = False  # an erasure deletes the server memories the user taught too
    keep_learning: bool = False  # an erasure leaves the user's privacy level as it was
    context: RequestContext | None = None
    # Why an operator asked (`ltm user forget --reason`), kept with the request's row.
    stated_reason: StatedReason | None = None

    @property
    def correlation_id(self) -> str | None:
        return self.request_id


class DataRequestCompleted(Event):
    """The answer: done (an erasure's `receipt`, an export's `document`) or refused."""

    EVENT_TYPE: ClassVar[str] = "data_request.completed"
    event_type: Literal["data_request.completed"] = "data_request.completed"

    request_id: RequestId
    kind: RequestKind
    subject: Subject
    requested_by: RequestedBy
    status: RequestStatus
    reason: RefusalReason | None = None
    receipt: Receipt | None = None
    document: ExportDocument | None = None

    @property
    def correlation_id(self) -> str | None:
        return self.request_id


class SubjectChanged(Event):
    """Common fields of the audit events of a done request; no text."""

    request_id: RequestId
    kind: RequestKind
    subject_kind: SubjectKind
    subject_id: DiscordId
    requested_by: RequestedBy
    receipt: Receipt | None = None

    @property
    def correlation_id(self) -> str | None:
        return self.request_id


class SubjectExported(SubjectChanged):
    EVENT_TYPE: ClassVar[str] = "subject.exported"
    event_type: Literal["subject.exported"] = "subject.exported"


class SubjectErased(SubjectChanged):
    EVENT_TYPE: ClassVar[str] = "subject.erased"
    event_type: Literal["subject.erased"] = "subject.erased"

    # As the request asked: what `ltm data-requests replay` asks again after a restore.
    strict: bool = False
    keep_learning: bool = False


class NoticeRetract(Event):
    """Take back a notice a gateway posted about a memory that was erased."""

    EVENT_TYPE: ClassVar[str] = "notice.retract"
    event_type: Literal["notice.retract"] = "notice.retract"

    channel_id: DiscordId
    message_id: DiscordId
    memory_id: int
