"""A short cluster chaos run (`bench/chaos/cluster.py`): a few hundred random tool calls from
three publishers, two workers and two gateway processes, each connected first to another node
of a three-node RabbitMQ cluster of the test run's own, every queue 3-way replicated; the node
leading the worker queue is SIGKILLed and restarted, then a follower, then the PostgreSQL
primary of a pair of our own is SIGKILLed and its synchronous standby promoted.

`make chaos-cluster` is the full version, on nodes it starts itself.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from bench.chaos.cluster import run_cluster_chaos
from contracts import MemoryStatus
from harness.localnodes import RabbitCluster
from harness.localnodes.running import MachineServices, started_pair

CALLS = 200


@pytest.mark.slow
@pytest.mark.localnodes
@pytest.mark.timeout(300)
async def test_nothing_lost_nothing_twice_when_a_node_or_the_database_primary_dies(
    rabbit_cluster: RabbitCluster, machine_services: MachineServices, tmp_path: Path
) -> None:
    seed = random.randrange(2**32)
    with started_pair() as pair:
        report = await run_cluster_chaos(
            rabbit_cluster,
            pair,
            calls=CALLS,
            publish_s=25.0,
            seed=seed,
            log_dir=tmp_path,
            settle_timeout_s=60.0,
            hold_s=3.0,
        )

    summary = f"seed {seed}, logs in {tmp_path}\n{report.table()}\n" + "\n".join(report.problems())
    print(summary)
    assert report.sent == CALLS, summary
    assert report.answered == CALLS and report.lost == 0, summary
    assert report.writes_applied_twice == 0 and report.embeds_posted_twice == 0, summary
    assert report.survival_errors == [], summary
    assert report.problems() == [], summary
    # Each kill happened, and calls were answered after each.
    kills = [what for what, _ in report.node_kills]
    assert len(kills) == 3, summary
    assert "leader" in kills[0] and "follower" in kills[1] and "PostgreSQL" in kills[2], summary
    assert all(seconds is not None for _, seconds in report.node_kills), summary
    for status in (MemoryStatus.UPDATED, MemoryStatus.DELETED, MemoryStatus.SAVED):
        assert report.statuses[status.value] > 0, summary
    assert report.embeds_posted == report.revisions, summary
