"""What breaks during a cluster chaos run, one at a time so that a majority always stands: the
broker node leading the worker queue is SIGKILLed and restarted, later a node following it,
and then the PostgreSQL primary is SIGKILLed and its synchronous standby promoted.

Each kill strikes when the publishers reached its share of the calls, and the publishers go
past the next share only once the node killed before is back: however long a restart takes,
every kill lands among calls in flight, with calls still to come after it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from harness.localnodes import PostgresPair, RabbitCluster

__all__ = ["SHARES", "NodeFaults", "PublishGates", "recovery_after"]

# Of the publishes, where each kill strikes: the leader's, the follower's, the primary's.
SHARES = (0.15, 0.4, 0.65)


class PublishGates:
    """Where the publishers meet the faults: fault `i` strikes once publish `marks[i]` is
    reached; the publishers pass `marks[i]` only once fault `i - 1` is over."""

    def __init__(self, publishes: int, shares: Sequence[float] = SHARES) -> None:
        self.marks = [int(publishes * share) for share in shares]
        self.reached = [asyncio.Event() for _ in shares]
        self.over = [asyncio.Event() for _ in shares]

    async def before(self, publish: int) -> None:
        """Called by the publishers before each publish, in order."""
        for n, mark in enumerate(self.marks):
            if publish == mark:
                if n > 0:
                    await self.over[n - 1].wait()
                self.reached[n].set()

    async def strike(self, n: int, fault: Callable[[], Awaitable[None]]) -> None:
        await self.reached[n].wait()
        try:
            await fault()
        finally:
            self.over[n].set()


@dataclass
class NodeFaults:
    """The kills of a run on `cluster` and `pair`, and when each struck (time.monotonic())."""

    cluster: RabbitCluster
    pair: PostgresPair
    queue: str  # the worker queue, whose leader is killed first
    hold_s: float = 5.0  # how long a killed node stays down
    struck: list[tuple[str, float]] = field(default_factory=list)
    killed_nodes: list[str] = field(default_factory=list)

    async def run(self, gates: PublishGates) -> None:
        await gates.strike(0, lambda: self._kill_member(leader=True))
        await gates.strike(1, lambda: self._kill_member(leader=False))
        await gates.strike(2, self._fail_over_database)

    async def _member(self, *, leader: bool) -> str:
        """A node of the worker queue's replicas: its leader, or one that follows it (one not
        killed before, when there is one)."""
        for _ in range(60):
            members = await asyncio.to_thread(self.cluster.quorum_members, self.queue)
            chosen = [member.node for member in members if member.leads == leader]
            chosen.sort(key=lambda node: node in self.killed_nodes)
            if chosen and any(member.leads for member in members):
                return chosen[0]
            await asyncio.sleep(0.5)  # between elections: no member leads yet
        raise RuntimeError(f"no {'leader' if leader else 'follower'} of {self.queue} found")

    async def _kill_member(self, *, leader: bool) -> None:
        name = await self._member(leader=leader)
        role = "leader" if leader else "follower"
        at = time.monotonic()
        await asyncio.to_thread(self.cluster.kill, name)
        self.killed_nodes.append(name)
        self.struck.append((f"kill -9 of broker node {name} ({role} of the worker queue)", at))
        await asyncio.sleep(self.hold_s)  # the node's absence is the fault
        await asyncio.to_thread(self.cluster.restart, name)

    async def _fail_over_database(self) -> None:
        at = time.monotonic()
        await asyncio.to_thread(self.pair.kill_primary)
        self.struck.append(("kill -9 of the PostgreSQL primary, standby promoted", at))
        await asyncio.to_thread(self.pair.promote_standby)


def recovery_after(
    at: float, published: dict[str, float], answered: Sequence[tuple[float, str]]
) -> float | None:
    """Seconds from `at` to the first answer of a call first published after it (work taken
    on again, not what was already on its way); None when no such call was answered."""
    later = [when for when, call in answered if published.get(call, 0.0) > at]
    return min(later) - at if later else None
