"""What the AsyncAPI document's parts share: reference paths, message names, model groups."""

from __future__ import annotations

from typing import Final

from contracts.audit import MemoryCreated, MemoryDeleted, MemoryRestored, MemoryUpdated
from contracts.codec import EVENT_TYPES
from contracts.envelope import Event
from contracts.operator import DeadLettersPurged, DeadLettersReplayed
from contracts.tool_calls import ToolCallRequested

__all__ = [
    "AMQP_BINDING_VERSION",
    "AUDIT_MODELS",
    "EMITTED_MODELS",
    "MESSAGES",
    "MESSAGE_NAMES",
    "OPERATOR_MODELS",
    "SCHEMAS",
    "messages_of",
    "ref",
]

AMQP_BINDING_VERSION: Final = "0.3.0"

SCHEMAS: Final = "#/components/schemas/"
MESSAGES: Final = "#/components/messages/"

# The message each event type is known by in the document: its model's name, in the codec's order.
MESSAGE_NAMES: Final[dict[type[Event], str]] = {
    model: model.__name__ for model in EVENT_TYPES.values()
}
AUDIT_MODELS: Final = (MemoryCreated, MemoryUpdated, MemoryDeleted, MemoryRestored)
OPERATOR_MODELS: Final = (DeadLettersReplayed, DeadLettersPurged)
# Everything the worker emits on the events exchange (all but the bots' tool calls).
EMITTED_MODELS: Final = tuple(
    model for model in EVENT_TYPES.values() if model is not ToolCallRequested
)


def ref(target: str) -> dict[str, str]:
    return {"$ref": target}


def messages_of(*models: type[Event]) -> dict[str, dict[str, str]]:
    return {MESSAGE_NAMES[model]: ref(MESSAGES + MESSAGE_NAMES[model]) for model in models}
