"""Choosing the leader of a quorum queue on our own cluster, for a failover to hit it.

RabbitMQ 3.10 has no command that moves a leader (`rabbitmq-queues transfer_leadership`
came later), so the other members leave, which leaves the chosen one leading alone, and
join again.
"""

from __future__ import annotations

from harness.localnodes.host import wait_until
from harness.localnodes.rabbit import RabbitCluster
from infra.observability.logs import get_logger

__all__ = ["make_leader"]

log = get_logger(__name__)


def make_leader(
    cluster: RabbitCluster,
    queue: str,
    node: str,
    *,
    vhost: str | None = None,
    timeout: float = 60.0,
) -> None:
    """Returns once `node` leads the quorum queue `queue`, every member back in it."""
    vhost = vhost or cluster.spec.vhost
    members = {member.node for member in cluster.quorum_members(queue, vhost)}
    if node not in members:
        raise ValueError(f"{node} holds no replica of {queue!r}: {sorted(members)}")
    if cluster.quorum_leader(queue, vhost) == node:
        return
    others = sorted(members - {node})
    queues = cluster.node(node).tool
    for other in others:
        queues("rabbitmq-queues", "delete_member", "-p", vhost, queue, other)
    wait_until(
        lambda: cluster.quorum_leader(queue, vhost) == node,
        timeout=timeout,
        interval=0.2,
        what=f"{node} leading {queue}",
    )
    for other in others:
        queues("rabbitmq-queues", "add_member", "-p", vhost, queue, other)
    wait_until(
        lambda: {m.node for m in cluster.quorum_members(queue, vhost)} == members,
        timeout=timeout,
        interval=0.2,
        what=f"every member back in {queue}",
    )
    log.info("localnodes.quorum_leader_moved", queue=queue, leader=node)
