"""The bot side of the long-term-memory contract: results, embeds, caches, member directory.

Runs as its own process (`run_gateway`, REST only) or inside a hikari `GatewayBot`
(`Gateway.for_bot(bot, settings)`, `attach_directory(bot, directory)`).
"""

from gateway.app import Gateway
from gateway.caches import (
    CacheInvalidationConsumer,
    GatewayCaches,
    InvalidationListener,
    TTLCache,
    instance_name,
)
from gateway.console import ConsoleSender, render_embed
from gateway.data_rights import DataRights
from gateway.delivery import Delivery, EmbedSender, Retraction, SendResult
from gateway.directory import (
    MemberDirectory,
    MemberRow,
    attach_directory,
    detach_directory,
    member_row,
)
from gateway.discord_sender import (
    DiscordSender,
    RetryPolicy,
    discord_nonce,
    is_transient_discord_fault,
)
from gateway.embeds import to_hikari_embed
from gateway.memories import MemoryReader, MemorySource
from gateway.metrics import EmbedFailure, GatewayMetrics
from gateway.notices import NoticeRecords, PostedNotices
from gateway.process import open_sender, run_gateway
from gateway.shard_consumer import AnswerSink, ResultSink, SeenEvents, ShardConsumer
from gateway.tool_client import (
    TIMEOUT_STATUS,
    UNAVAILABLE_STATUS,
    MessageContext,
    ToolClient,
    ToolClientUnavailable,
    decode_tool_arguments,
    timeout_answer,
    unavailable_answer,
)

__all__ = [
    "TIMEOUT_STATUS",
    "UNAVAILABLE_STATUS",
    "AnswerSink",
    "CacheInvalidationConsumer",
    "ConsoleSender",
    "DataRights",
    "Delivery",
    "DiscordSender",
    "EmbedFailure",
    "EmbedSender",
    "Gateway",
    "GatewayCaches",
    "GatewayMetrics",
    "InvalidationListener",
    "MemberDirectory",
    "MemberRow",
    "MemoryReader",
    "MemorySource",
    "MessageContext",
    "NoticeRecords",
    "PostedNotices",
    "ResultSink",
    "Retraction",
    "RetryPolicy",
    "SeenEvents",
    "SendResult",
    "ShardConsumer",
    "TTLCache",
    "ToolClient",
    "ToolClientUnavailable",
    "attach_directory",
    "decode_tool_arguments",
    "detach_directory",
    "discord_nonce",
    "instance_name",
    "is_transient_discord_fault",
    "member_row",
    "open_sender",
    "render_embed",
    "run_gateway",
    "timeout_answer",
    "to_hikari_embed",
    "unavailable_answer",
]
