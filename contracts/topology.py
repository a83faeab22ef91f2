"""Exchange, queue and routing-key names, under a deployment prefix (`LTM_AMQP_PREFIX`), and
the queues' arguments.

Pure data: bot shards use them with whatever AMQP client they have.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from contracts.data_requests import DATA_REQUEST_ROUTING_KEY, retract_routing_key

__all__ = [
    "AUDIT_BINDING_KEYS",
    "CACHE_BINDING_KEY",
    "DEFAULT_PREFIX",
    "Binding",
    "Declarations",
    "QueueDeclaration",
    "Topology",
    "audit_routing_key",
    "audit_stream_arguments",
    "cache_routing_key",
    "dead_letter_queue_arguments",
    "embed_routing_key",
    "result_routing_key",
    "shard_declarations",
    "shard_of_routing_key",
    "shard_queue_arguments",
    "topology_declarations",
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


# What every gateway process's cache queue is bound with on the events exchange.
CACHE_BINDING_KEY: Final = "cache.#"


def cache_routing_key(cache: str, key: str) -> str:
    return f"cache.{cache}.{key}"


# What the audit stream is bound with on the events exchange: the changes, the operators' acts
# and the data requests answered, which hold no text. Results, embeds, invalidations and
# retractions go to the shard and cache queues alone (transient, with their TTL).
AUDIT_BINDING_KEYS: Final = ("memory.#", "operator.#", "subject.#")


def audit_routing_key(action: str, scope: str) -> str:
    """`memory.<created|updated|deleted|restored>.<server_wide|target_user>`."""
    return f"memory.{action}.{scope}"


@dataclass(frozen=True, slots=True)
class Topology:
    prefix: str = DEFAULT_PREFIX
    # Replicas of each quorum queue and of the audit stream on a cluster (`LTM_AMQP_REPLICAS`);
    # None: no argument, the broker's default. Part of the queues' arguments, so the same in
    # every process of a deployment.
    replicas: int | None = None

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

    def call_queue(self, instance: str) -> str:
        """A one-off caller's private queue for its answer (`ltm call`), among the bots'."""
        return f"{self.prefix}.gateway.call.{instance}"

    def operator_queue(self, instance: str) -> str:
        """An operator's private queue for the answer of its data request (`ltm user forget`)."""
        return f"{self.prefix}.operator.{instance}"

    @property
    def gateway_queues_prefix(self) -> str:
        """Every queue of the bots' processes begins with this: shards, caches, calls."""
        return f"{self.prefix}.gateway."


# Functions, not constants: each caller gets a dict of its own to hand to its AMQP client.


def worker_queue_arguments(topology: Topology) -> dict[str, Any]:
    # Exactly these: every process declares the queue, and a mismatch closes the channel.
    return {
        "x-queue-type": "quorum",
        "x-dead-letter-exchange": topology.dead_letter_exchange,
        "x-dead-letter-strategy": "at-least-once",
        "x-overflow": "reject-publish",
        "x-delivery-limit": 5,
        **_quorum_replicas(topology.replicas),
    }


def dead_letter_queue_arguments(replicas: int | None = None) -> dict[str, Any]:
    return {"x-queue-type": "quorum", **_quorum_replicas(replicas)}


def shard_queue_arguments(replicas: int | None = None) -> dict[str, Any]:
    return {"x-queue-type": "quorum", **_quorum_replicas(replicas)}


def audit_stream_arguments(replicas: int | None = None) -> dict[str, Any]:
    return {
        "x-queue-type": "stream",
        "x-max-age": "30D",
        "x-stream-max-segment-size-bytes": 50_000_000,
        **({} if replicas is None else {"x-initial-cluster-size": replicas}),
    }


def _quorum_replicas(replicas: int | None) -> dict[str, Any]:
    # Only when asked: unset, the arguments are exactly those outside bots declare with. The
    # broker caps the group at the nodes it has (3 on one node makes one member).
    return {} if replicas is None else {"x-quorum-initial-group-size": replicas}


# The topology as data: what `infra.messaging.topology` declares and `ltm broker-definitions`
# writes out,
# so that the two cannot diverge. Every exchange is a durable topic exchange; every queue here
# is durable (a gateway process's own cache queue, exclusive, is declared by that process).


@dataclass(frozen=True, slots=True)
class QueueDeclaration:
    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Binding:
    exchange: str
    queue: str
    routing_key: str


@dataclass(frozen=True, slots=True)
class Declarations:
    exchanges: tuple[str, ...] = ()
    queues: tuple[QueueDeclaration, ...] = ()
    bindings: tuple[Binding, ...] = ()

    def __add__(self, other: Declarations) -> Declarations:
        return Declarations(
            self.exchanges + other.exchanges,
            self.queues + other.queues,
            self.bindings + other.bindings,
        )


def topology_declarations(
    topology: Topology, tool_names: Iterable[str], shards: Iterable[int] = ()
) -> Declarations:
    """The exchanges, the worker's queue bound to each tool name, the dead-letter queue, the
    audit stream, and the given shards' queues."""
    shared = Declarations(
        exchanges=(
            topology.tool_calls_exchange,
            topology.dead_letter_exchange,
            topology.events_exchange,
        ),
        queues=(
            QueueDeclaration(topology.worker_queue, worker_queue_arguments(topology)),
            QueueDeclaration(
                topology.dead_letter_queue, dead_letter_queue_arguments(topology.replicas)
            ),
            QueueDeclaration(topology.audit_stream, audit_stream_arguments(topology.replicas)),
        ),
        bindings=(
            *(
                Binding(topology.tool_calls_exchange, topology.worker_queue, name)
                for name in (*tool_names, DATA_REQUEST_ROUTING_KEY)
            ),
            Binding(topology.dead_letter_exchange, topology.dead_letter_queue, "#"),
            *(
                Binding(topology.events_exchange, topology.audit_stream, key)
                for key in AUDIT_BINDING_KEYS
            ),
        ),
    )
    for shard_id in shards:
        shared += shard_declarations(topology, shard_id)
    return shared


def shard_declarations(topology: Topology, shard_id: int) -> Declarations:
    """One shard's queue and its bindings (the events exchange is the topology's)."""
    queue = topology.shard_queue(shard_id)
    return Declarations(
        queues=(QueueDeclaration(queue, shard_queue_arguments(topology.replicas)),),
        bindings=(
            Binding(topology.events_exchange, queue, result_routing_key(shard_id)),
            Binding(topology.events_exchange, queue, embed_routing_key(shard_id)),
            Binding(topology.events_exchange, queue, retract_routing_key(shard_id)),
        ),
    )
