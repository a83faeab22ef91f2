"""What breaks during a chaos run, and when: workers SIGKILLed (every other one brought back
with a failpoint armed), every broker connection of the run's virtual host closed, the
workers' path to the broker stalled until their heartbeats give it up, and the database
restarted or closed for a while."""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal

import psycopg

from bench.chaos.report import ChaosReport
from bench.chaos.workers import WorkerSlot
from harness.amqp_proxy import AmqpProxy
from harness.services import TestServices, rabbitmqctl, refuse_connections
from harness.waiting import eventually

__all__ = ["FAILPOINTS", "DbFault", "FaultPlan", "database_fault", "inflict", "schedule"]

DbFault = Literal["restart", "outage", "none"]

FAILPOINTS: Final = ("after_commit", "after_publish", "after_mark")
# Longer than the 6 s after which a worker with a 1 s heartbeat gives its connection up.
STALL_S: Final = 8.0


@dataclass(frozen=True)
class FaultPlan:
    """How many of each fault, and the database's."""

    kills: int = 8
    closures: int = 3
    stalls: int = 1
    db_fault: DbFault = "restart"
    outage_s: float = 3.0
    # `restart`'s PostgreSQL: an instance of the run's own, never the machine's.
    restart_database: Callable[[], None] | None = None


def schedule(rng: random.Random, plan: FaultPlan, *, span_s: float) -> list[tuple[float, str]]:
    """When each fault strikes, spread over the publishing time (the first tenth is calm)."""
    faults: list[tuple[float, str]] = []
    for kind, count in (("kill", plan.kills), ("closure", plan.closures), ("stall", plan.stalls)):
        for n in range(count):
            at = span_s * (0.1 + 0.8 * (n + rng.random()) / count)
            faults.append((at, kind))
    if plan.db_fault != "none":
        faults.append((span_s * 0.55, "db"))
    return sorted(faults)


async def _database_answers(database_url: str) -> bool:
    try:
        async with await psycopg.AsyncConnection.connect(database_url, connect_timeout=2) as c:
            await c.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


async def database_fault(
    kind: DbFault,
    database_url: str,
    *,
    outage_s: float,
    restart_database: Callable[[], None] | None,
) -> None:
    """`restart`: the run's own PostgreSQL instance, restarted (`restart_database`); `outage`:
    this run's database alone refuses connections and loses the open ones for `outage_s`."""
    if kind == "restart":
        if restart_database is None:
            raise RuntimeError("a restart needs a PostgreSQL instance of the run's own")
        await asyncio.to_thread(restart_database)
    elif kind == "outage":
        await asyncio.to_thread(refuse_connections, database_url, refuse=True)
        try:
            await asyncio.sleep(outage_s)  # the outage itself: its length is the fault
        finally:
            await asyncio.to_thread(refuse_connections, database_url, refuse=False)
    if kind != "none":
        try:
            await eventually(
                lambda: _database_answers(database_url), timeout=60, interval=0.2, what="db"
            )
        except AssertionError:
            raise RuntimeError("the database did not come back after the fault") from None


@dataclass
class _Targets:
    """What the faults strike: the run's workers, broker virtual host, proxy and database."""

    rng: random.Random
    slots: list[WorkerSlot]
    services: TestServices
    proxy: AmqpProxy
    report: ChaosReport
    plan: FaultPlan

    def __post_init__(self) -> None:
        self.failpoints = itertools.cycle(FAILPOINTS)

    async def kill(self) -> None:
        # Every other death brings the worker back with a failpoint armed.
        failpoint = next(self.failpoints) if self.report.kills % 2 == 1 else None
        for _ in range(400):
            # A live worker: the supervisor may still be bringing the last one back.
            alive = [slot for slot in self.slots if slot.alive]
            if alive and self.rng.choice(alive).kill(then_failpoint=failpoint):
                self.report.kills += 1
                return
            await asyncio.sleep(0.05)

    async def closure(self) -> None:
        assert self.services.vhost is not None
        await asyncio.to_thread(
            rabbitmqctl, "close_all_connections", "-p", self.services.vhost, "chaos run"
        )
        self.report.broker_closures += 1

    async def stall(self) -> None:
        self.proxy.stall()
        await asyncio.sleep(STALL_S)  # the stall itself: its length is the fault
        self.proxy.resume()
        self.report.stalls += 1

    async def db(self) -> None:
        plan = self.plan
        await database_fault(
            plan.db_fault,
            self.services.database_url,
            outage_s=plan.outage_s,
            restart_database=plan.restart_database,
        )
        self.report.db_faults += 1


async def inflict(
    rng: random.Random,
    plan: FaultPlan,
    *,
    span: float,
    slots: list[WorkerSlot],
    services: TestServices,
    proxy: AmqpProxy,
    report: ChaosReport,
) -> None:
    """Each fault of the plan at its time, counted in the report."""
    targets = _Targets(rng, slots, services, proxy, report, plan)
    begin = time.monotonic()
    for at, kind in schedule(rng, plan, span_s=span):
        delay = begin + at - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        await getattr(targets, kind)()
