"""The cluster chaos run's pure parts: each process's node order, the gates between the
publishers and the kills, and the recovery time after a kill."""

from __future__ import annotations

import asyncio

from bench.chaos.cluster import rotated
from bench.chaos.cluster_faults import PublishGates, recovery_after
from harness.waiting import eventually

URLS = ["amqp://a/v", "amqp://b/v", "amqp://c/v"]


def test_each_process_starts_at_its_own_node_and_keeps_the_others_to_fail_over_to() -> None:
    assert rotated(URLS, 0) == "amqp://a/v,amqp://b/v,amqp://c/v"
    assert rotated(URLS, 1) == "amqp://b/v,amqp://c/v,amqp://a/v"
    assert rotated(URLS, 5) == "amqp://c/v,amqp://a/v,amqp://b/v"


async def test_a_kill_strikes_at_its_share_and_the_next_share_waits_until_it_is_over() -> None:
    gates = PublishGates(100, shares=(0.1, 0.5))
    order: list[str] = []
    release = asyncio.Event()

    async def fault() -> None:
        order.append("kill")
        await release.wait()  # the node is still down
        order.append("back")

    async def publish() -> None:
        for n in range(100):
            await gates.before(n)
            if n in (10, 50):
                order.append(f"publish {n}")

    striking = asyncio.create_task(gates.strike(0, fault))
    publishing = asyncio.create_task(publish())

    async def killed() -> bool:
        return order[-1:] == ["kill"]

    await eventually(killed, timeout=5, what="the kill")
    assert order == ["publish 10", "kill"]
    assert not publishing.done()  # held at publish 50 until the node is back
    release.set()
    await asyncio.wait_for(asyncio.gather(striking, publishing), 5)
    assert order == ["publish 10", "kill", "back", "publish 50"]
    assert gates.reached[1].is_set() and gates.over[0].is_set()


def test_recovery_counts_only_calls_published_after_the_kill() -> None:
    published = {"before": 9.0, "after": 10.5, "later": 11.0}
    answered = [(10.2, "before"), (12.0, "later"), (13.0, "after")]
    assert recovery_after(10.0, published, answered) == 2.0
    assert recovery_after(11.5, published, answered) is None
