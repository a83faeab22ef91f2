"""Messages of the long-term-memory service, shared with bot shards. Depends on pydantic only."""

from contracts.audit import MemoryChanged, MemoryDeleted, MemoryRestored, MemoryUpdated
from contracts.cache import CacheInvalidate, CacheName
from contracts.codec import (
    CONTENT_TYPE,
    EVENT_TYPES,
    InvalidEnvelope,
    amqp_properties,
    decode_event,
    decode_tool_call,
    encode_event,
)
from contracts.embeds import (
    DELETE_COLOR,
    UPDATE_COLOR,
    EmbedField,
    EmbedKind,
    EmbedPayload,
    EmbedRequested,
)
from contracts.envelope import SCHEMA_VERSION, Event, utc_now
from contracts.ids import DiscordId, ParticipantId, ToolCallId, is_matrix_id
from contracts.results import MemoryScope, ResultData, ToolCallCompleted
from contracts.statuses import MemoryStatus
from contracts.tool_calls import (
    UPDATE_LONG_TERM_MEMORY,
    Participant,
    ToolCallContext,
    ToolCallRequested,
)
from contracts.tool_declaration import (
    TOOL_DESCRIPTION,
    TOOL_PARAMETERS,
    gemini_function_declaration,
    openai_tool,
)
from contracts.topology import (
    DEFAULT_PREFIX,
    Topology,
    audit_routing_key,
    audit_stream_arguments,
    cache_routing_key,
    dead_letter_queue_arguments,
    embed_routing_key,
    result_routing_key,
    shard_of_routing_key,
    shard_queue_arguments,
    worker_queue_arguments,
)

__all__ = [
    "CONTENT_TYPE",
    "DEFAULT_PREFIX",
    "DELETE_COLOR",
    "EVENT_TYPES",
    "SCHEMA_VERSION",
    "TOOL_DESCRIPTION",
    "TOOL_PARAMETERS",
    "UPDATE_COLOR",
    "UPDATE_LONG_TERM_MEMORY",
    "CacheInvalidate",
    "CacheName",
    "DiscordId",
    "EmbedField",
    "EmbedKind",
    "EmbedPayload",
    "EmbedRequested",
    "Event",
    "InvalidEnvelope",
    "MemoryChanged",
    "MemoryDeleted",
    "MemoryRestored",
    "MemoryScope",
    "MemoryStatus",
    "MemoryUpdated",
    "Participant",
    "ParticipantId",
    "ResultData",
    "ToolCallCompleted",
    "ToolCallContext",
    "ToolCallId",
    "ToolCallRequested",
    "Topology",
    "amqp_properties",
    "audit_routing_key",
    "audit_stream_arguments",
    "cache_routing_key",
    "dead_letter_queue_arguments",
    "decode_event",
    "decode_tool_call",
    "embed_routing_key",
    "encode_event",
    "gemini_function_declaration",
    "is_matrix_id",
    "openai_tool",
    "result_routing_key",
    "shard_of_routing_key",
    "shard_queue_arguments",
    "utc_now",
    "worker_queue_arguments",
]
