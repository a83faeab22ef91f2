"""`LTM_AMQP_REPLICAS`: replica arguments on every queue the project declares, only when set."""

from __future__ import annotations

from contracts import TOOL_NAMES, Topology, topology_declarations
from infra.settings import Settings

# The arguments docs/contract.md lists: what outside bots declare the worker queue with.
WORKER_QUEUE = {
    "x-queue-type": "quorum",
    "x-dead-letter-exchange": "ltm.dead_letter",
    "x-dead-letter-strategy": "at-least-once",
    "x-overflow": "reject-publish",
    "x-delivery-limit": 5,
}


def _arguments(topology: Topology) -> dict[str, dict[str, object]]:
    declared = topology_declarations(topology, TOOL_NAMES, shards=[0, 1])
    return {queue.name: dict(queue.arguments) for queue in declared.queues}


def test_unset_the_arguments_are_exactly_those_of_the_contract() -> None:
    arguments = _arguments(Settings(amqp_replicas=None).topology)
    assert arguments["ltm.tool_calls.worker"] == WORKER_QUEUE
    assert arguments["ltm.tool_calls.dead"] == {"x-queue-type": "quorum"}
    assert arguments["ltm.gateway.shard.1"] == {"x-queue-type": "quorum"}
    assert "x-initial-cluster-size" not in arguments["ltm.audit"]


def test_set_every_quorum_queue_and_the_stream_get_that_many_replicas() -> None:
    arguments = _arguments(Settings(amqp_replicas=3, amqp_prefix="p").topology)
    quorum = {name: args for name, args in arguments.items() if args["x-queue-type"] == "quorum"}
    assert set(quorum) == {
        "p.tool_calls.worker",
        "p.tool_calls.dead",
        "p.gateway.shard.0",
        "p.gateway.shard.1",
    }
    assert all(args["x-quorum-initial-group-size"] == 3 for args in quorum.values())
    assert arguments["p.audit"]["x-initial-cluster-size"] == 3
    assert arguments["p.tool_calls.worker"] == {**WORKER_QUEUE, "x-dead-letter-exchange":
        "p.dead_letter", "x-quorum-initial-group-size": 3}  # fmt: skip
