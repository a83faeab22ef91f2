"""The envelope every event shares, and what all messages have in common."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any, ClassVar, Final, Self

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_serializer,
    model_validator,
)

__all__ = ["ENVELOPE_FIELDS", "SCHEMA_VERSION", "Event", "rfc3339_utc", "utc_now"]

# The version of every event type but those that changed since: an event type's own version is
# its model's `SCHEMA_VERSION` (`memory.*` is at 2: no texts).
SCHEMA_VERSION = 1

# Every message carries these. A producer's model fills them in; a received body must have
# them: a fresh random `event_id` for a body without one would defeat de-duplication.
ENVELOPE_FIELDS: Final = ("event_id", "event_type", "schema_version", "occurred_at")


def utc_now() -> datetime:
    return datetime.now(UTC)


def rfc3339_utc(value: datetime) -> str:
    """How the contract writes a time: RFC 3339 in UTC, `Z` for the offset."""
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _envelope_required(schema: dict[str, Any], model: type[BaseModel]) -> None:
    """In the JSON Schema, as in a received body, the envelope is required, and the version is
    the event type's own."""
    required = [name for name in schema.get("required", []) if name not in ENVELOPE_FIELDS]
    schema["required"] = [*ENVELOPE_FIELDS, *required]
    version = schema.get("properties", {}).get("schema_version")
    if version is not None and isinstance(model, type) and issubclass(model, Event):
        version["const"] = version["default"] = model.SCHEMA_VERSION


class Event(BaseModel):
    """Fields of every message. Subclasses fix `event_type` with a Literal.

    Built in Python, an event gets a new `event_id` and the current time; read from JSON, it
    must carry the whole envelope (`ENVELOPE_FIELDS`), or it is not valid.
    """

    # Unknown fields are ignored, so that a newer producer's additions do not break us;
    # the known ones are strict: a wrong type is an invalid envelope.
    model_config = ConfigDict(
        strict=True, frozen=True, extra="ignore", json_schema_extra=_envelope_required
    )

    EVENT_TYPE: ClassVar[str]
    # The version of this event type's body: a subclass that changes it sets both this and
    # the field's default.
    SCHEMA_VERSION: ClassVar[int] = SCHEMA_VERSION

    event_id: uuid.UUID = Field(default_factory=uuid.uuid4)
    event_type: str
    schema_version: int = SCHEMA_VERSION
    occurred_at: AwareDatetime = Field(default_factory=utc_now)
    causation_id: uuid.UUID | None = None

    @model_validator(mode="after")
    def _envelope_given(self, info: ValidationInfo) -> Self:
        if self.schema_version != self.SCHEMA_VERSION or isinstance(self.schema_version, bool):
            raise ValueError(
                f"schema_version {self.schema_version!r}: {self.EVENT_TYPE} is at"
                f" {self.SCHEMA_VERSION}"
            )
        # After validation, not before: a "before" validator would turn strict JSON parsing
        # (a UUID or a time from a string) into strict Python validation, which refuses both.
        if info.mode == "json":
            missing = [name for name in ENVELOPE_FIELDS if name not in self.model_fields_set]
            if missing:
                raise ValueError(f"missing {', '.join(missing)}")
        return self

    @field_serializer("occurred_at")
    def _rfc3339_utc(self, value: datetime) -> str:
        return rfc3339_utc(value)

    @property
    def correlation_id(self) -> str | None:
        """The tool call this event is about, where there is one (AMQP `correlation_id`)."""
        return getattr(self, "tool_call_id", None)
