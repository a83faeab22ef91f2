"""Exchange, queue and routing-key names, under a deployment prefix (`LTM_AMQP_PREFIX`), and
the queues' arguments.

Pure data: bot shards use them with whatever AMQP client they have.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "DEFAULT_PREFIX",
    "Topology",
    "audit_routing_key",
    "audit_stream_arguments",
    "cache_routing_key",
    "dead_letter_queue_arguments",
    "embed_routing_key",
    "result_routing_key",
    "shard_of_routing_key",
    "shard_queue_arguments",
    "worker_queue_arguments",
]

DEFAULT_PREFIX: Final = "ltm"


def result_routing_key(shard_id: int) -> str:
    return f"result.shard.{shard_id}"


def embed_routing_key(shard_id: int) -> str:
    return f"embed.shard.{shard_id}"


def shard_of_routing_key(routing_key: str) -> int | None:
    """The shard a result's or an embed's routing key names; None for any other key."""
    kind, _, shard = routing_key.partition(".shard.")
    if kind in ("result", "embed") and shard.isascii() and shard.isdigit():
        return int(shard)
    return None


def cache_routing_key(cache: str, key: str) -> str:
    return f"cache.{cache}.{key}"


def audit_routing_key(action: str, scope: str) -> str:
    """`memory.<created|updated|deleted|restored>.<server_wide|target_user>`."""
    return f"memory.{action}.{scope}"


@dataclass(frozen=True, slots=True)
class Topology:
    prefix: str = DEFAULT_PREFIX

    @property
    def tool_calls_exchange(self) -> str:
        return f"{self.prefix}.tool_calls"

    @property
    def worker_queue(self) -> str:
        return f"{self.prefix}.tool_calls.worker"

    @property
    def dead_letter_exchange(self) -> str:
        return f"{self.prefix}.dead_letter"

    @property
    def dead_letter_queue(self) -> str:
        return f"{self.prefix}.tool_calls.dead"

    @property
    def events_exchange(self) -> str:
        return f"{self.prefix}.events"

    @property
    def audit_stream(self) -> str:
        return f"{self.prefix}.audit"

    def shard_queue(self, shard_id: int) -> str:
        return f"{self.prefix}.gateway.shard.{shard_id}"

    def cache_queue(self, instance: str) -> str:
        return f"{self.prefix}.gateway.cache.{instance}"


# Functions, not constants: each caller gets a dict of its own to hand to its AMQP client.


def worker_queue_arguments(topology: Topology) -> dict[str, Any]:
    # Exactly these: every process declares the queue, and a mismatch closes the channel.
    return {
        "x-queue-type": "quorum",
        "x-dead-letter-exchange": topology.dead_letter_exchange,
        "x-dead-letter-strategy": "at-least-once",
        "x-overflow": "reject-publish",
        "x-delivery-limit": 5,
    }


def dead_letter_queue_arguments() -> dict[str, Any]:
    return {"x-queue-type": "quorum"}


def shard_queue_arguments() -> dict[str, Any]:
    return {"x-queue-type": "quorum"}


def audit_stream_arguments() -> dict[str, Any]:
    return {
        "x-queue-type": "stream",
        "x-max-age": "30D",
        "x-stream-max-segment-size-bytes": 50_000_000,
    }
