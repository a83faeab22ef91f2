"""The envelope every event shares, and what all messages have in common."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import ClassVar, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_serializer

__all__ = ["SCHEMA_VERSION", "Event", "rfc3339_utc", "utc_now"]

SCHEMA_VERSION = 1


def utc_now() -> datetime:
    return datetime.now(UTC)


def rfc3339_utc(value: datetime) -> str:
    """How the contract writes a time: RFC 3339 in UTC, `Z` for the offset."""
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


class Event(BaseModel):
    """Fields of every message. Subclasses fix `event_type` with a Literal."""

    # Unknown fields are ignored, so that a newer producer's additions do not break us;
    # the known ones are strict: a wrong type is an invalid envelope.
    model_config = ConfigDict(strict=True, frozen=True, extra="ignore")

    EVENT_TYPE: ClassVar[str]

    event_id: uuid.UUID = Field(default_factory=uuid.uuid4)
    event_type: str
    schema_version: Literal[1] = 1
    occurred_at: AwareDatetime = Field(default_factory=utc_now)
    causation_id: uuid.UUID | None = None

    @field_serializer("occurred_at")
    def _rfc3339_utc(self, value: datetime) -> str:
        return rfc3339_utc(value)

    @property
    def correlation_id(self) -> str | None:
        """The tool call this event is about, where there is one (AMQP `correlation_id`)."""
        return getattr(self, "tool_call_id", None)
