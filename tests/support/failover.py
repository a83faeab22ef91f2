"""Helpers of the failover tests: a broker URL list over our own cluster with a dead node
first, memories to update, and whether every call was answered."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence

from contracts import ToolCallCompleted, ToolCallRequested
from harness.broker import EventTap
from harness.localnodes import RabbitCluster
from harness.localnodes.configuration import amqp_url
from harness.processes import LtmProcess, free_port
from harness.snowflake import snowflake
from harness.world import Persona, World, tool_call

__all__ = [
    "answered",
    "cluster_env",
    "new_prefix",
    "node_of",
    "stuck_call",
    "updates_of_new_memories",
]


def cluster_env(cluster: RabbitCluster, prefix: str, **extra: str) -> dict[str, str]:
    """A process's broker settings on `cluster`: a node that does not exist first, then every
    node; three replicas of each queue (so that a queue outlives a node); a prefix of its own."""
    spec = cluster.spec
    dead = amqp_url(free_port(), user=spec.user, password=spec.password, vhost=spec.vhost)
    return {
        "LTM_AMQP_URL": ",".join([dead, *cluster.amqp_urls()]),
        "LTM_AMQP_PREFIX": prefix,
        "LTM_AMQP_REPLICAS": "3",
        **extra,
    }


def new_prefix(label: str) -> str:
    return f"ltm-{label}-{uuid.uuid4().hex[:8]}"


async def node_of(cluster: RabbitCluster, connection_name: str) -> str | None:
    """The one node holding the connection named so; None while there is not exactly one."""
    nodes = await asyncio.to_thread(cluster.connection_nodes, connection_name)
    return nodes[0] if len(nodes) == 1 else None


async def updates_of_new_memories(
    world: World, persona: Persona, count: int
) -> list[tuple[int, ToolCallRequested]]:
    """`count` new memories of `persona`, each with the call that updates it."""
    pairs = []
    for n in range(count):
        memory_id = await world.server_memory(persona, f"memory {n} v0")
        call = tool_call(
            persona,
            {"memory_id": memory_id, "memory_content": f"memory {n} v1"},
            triggerer_id=snowflake(),
        )
        pairs.append((memory_id, call))
    return pairs


def answered(tap: EventTap, calls: Sequence[ToolCallRequested]) -> bool:
    done = {event.tool_call_id for event in tap.events(ToolCallCompleted)}
    return all(call.tool_call_id in done for call in calls)


async def stuck_call(cluster: RabbitCluster, worker: LtmProcess, tool_call_id: str) -> str:
    """What a failing test says of a call never answered: the queues of the cluster, what
    the worker said of the call, and the worker's last lines."""
    queues = await asyncio.to_thread(cluster.queue_listing)
    lines = worker.output().splitlines()
    of_call = [line for line in lines if tool_call_id in line]
    return "\n".join(
        [f"call {tool_call_id} not answered", "queues:", queues, "worker on the call:",
         *of_call, "worker's last lines:", *lines[-40:]]
    )  # fmt: skip
