"""One chaos run on a database and virtual host of the caller's (`run_chaos`): seed, plan,
start the workers and a gateway, publish while the faults strike, settle, check."""

from __future__ import annotations

import asyncio
import random
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from bench.chaos.broker import HarnessBroker, delete_run_topology
from bench.chaos.checks import check_run, unexpected_log_lines
from bench.chaos.data_rights import (
    ErasableSubject,
    check_erasures,
    publish_data_requests,
    request_ids,
    seed_subjects,
)
from bench.chaos.faults import DbFault, FaultPlan, inflict
from bench.chaos.plan import PlannedCall, Planner, Publish, publishes_of
from bench.chaos.report import ChaosReport
from bench.chaos.settle import settle_answers, settle_embeds
from bench.chaos.workers import WorkerSlot
from bench.chaos.world import ChaosWorld, seed_world
from contracts import Topology
from gateway import Gateway
from harness.amqp_proxy import AmqpProxy
from harness.fake_discord import FakeDiscord
from harness.gateway import running_gateway
from harness.services import TestServices, rabbitmqctl
from infra.settings import Settings

__all__ = ["Scenario", "prepare", "publish_paced", "run_chaos", "worker_env"]


@dataclass(frozen=True)
class Scenario:
    """The seeded world, the calls planned in it and the publishes that carry them."""

    world: ChaosWorld
    planned: list[PlannedCall]
    publishes: list[Publish]

    def count_into(self, report: ChaosReport) -> None:
        report.sent = len(self.planned)
        report.publishes = len(self.publishes)
        report.duplicate_publishes = sum(p.duplicate for p in self.publishes)


async def prepare(
    database_url: str, rng: random.Random, *, calls: int, shards: int, duplicates: float
) -> Scenario:
    world = await seed_world(database_url, rng, calls)
    planned = Planner(world, rng, shards).plan(calls)
    return Scenario(world, planned, publishes_of(planned, rng, duplicates))


def worker_env(prefix: str, world: ChaosWorld, *, db_retry_s: float) -> dict[str, str]:
    """What every worker of a run is started with, besides the services' own settings."""
    return {
        "LTM_AMQP_PREFIX": prefix,
        "LTM_DB_RETRY_SECONDS": str(db_retry_s),
        "LTM_OUTBOX_SWEEP_INTERVAL_S": "0.5",
        "LTM_SHUTDOWN_GRACE_S": "10",
        "LTM_PREFETCH": "32",
        "LTM_MAX_SERVER_MEMORIES": str(world.server_limit),
        "LTM_MAX_PERSONAL_MEMORIES": str(world.personal_limit),
    }


async def publish_paced(harness: HarnessBroker, publishes: list[Publish], span: float) -> None:
    """At a steady pace over `span` seconds, so that every fault lands among calls in flight."""
    begin = time.monotonic()
    for n, publish in enumerate(publishes):
        due = begin + span * n / len(publishes)
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        await harness.publish(publish.message)


@dataclass(frozen=True)
class _Run:
    """What one run's steps share."""

    services: TestServices
    settings: Settings
    topology: Topology
    scenario: Scenario
    report: ChaosReport
    logs: Path
    shards: int
    settle_timeout_s: float
    subjects: list[ErasableSubject]


async def run_chaos(
    services: TestServices,
    *,
    calls: int = 3000,
    kills: int = 8,
    broker_closures: int = 3,
    stalls: int = 1,
    db_fault: DbFault = "restart",
    workers: int = 2,
    shards: int = 2,
    publish_s: float | None = None,
    duplicates: float = 0.1,
    seed: int | None = None,
    log_dir: Path | None = None,
    settle_timeout_s: float = 120.0,
    db_retry_s: float = 1.0,
    outage_s: float = 3.0,
    restart_database: Callable[[], None] | None = None,
    data_requests: bool = True,
) -> ChaosReport:
    """One chaos run on `services` (its database and virtual host), under a prefix of its own."""
    started = time.monotonic()
    rng = random.Random(seed)
    report = ChaosReport(db_fault_kind=db_fault)
    logs = log_dir or Path(tempfile.mkdtemp(prefix="ltm-chaos-"))
    logs.mkdir(parents=True, exist_ok=True)
    report.log_dir = str(logs)
    if broker_closures and services.vhost is None:
        raise RuntimeError("closing broker connections needs rabbitmqctl and a vhost of our own")
    prefix = f"{services.amqp_prefix}-chaos{uuid.uuid4().hex[:6]}"
    settings = Settings(
        database_url=services.database_url,
        amqp_url=services.amqp_url,
        amqp_prefix=prefix,
        metrics_port=0,
    )
    scenario = await prepare(
        services.database_url, rng, calls=calls, shards=shards, duplicates=duplicates
    )
    scenario.count_into(report)
    # Users beside the world, exported then erased while the faults strike.
    subjects = await seed_subjects(services.database_url, rng) if data_requests else []
    run = _Run(
        services,
        settings,
        settings.topology,
        scenario,
        report,
        logs,
        shards,
        settle_timeout_s,
        subjects,
    )
    env = worker_env(prefix, scenario.world, db_retry_s=db_retry_s)
    plan = FaultPlan(kills, broker_closures, stalls, db_fault, outage_s, restart_database)
    span = publish_s if publish_s is not None else max(10.0, calls / 50)
    await _run_with_faults(run, env, workers=workers, rng=rng, plan=plan, span=span)
    report.duration_s = time.monotonic() - started
    return report


async def _run_with_faults(
    run: _Run,
    env: dict[str, str],
    *,
    workers: int,
    rng: random.Random,
    plan: FaultPlan,
    span: float,
) -> None:
    harness = HarnessBroker(run.settings, run.topology)
    await harness.start()
    # The workers and the gateway reach the broker through a proxy that can stall the path;
    # with a short heartbeat they give a stalled connection up after 3 x (1 + 1) s.
    proxy = AmqpProxy(run.services.amqp_url)
    slots = [WorkerSlot(f"worker{n}", run.services, env, run.logs) for n in range(workers)]
    try:
        async with proxy, FakeDiscord() as fake:
            via_proxy = run.settings.model_copy(update={"amqp_url": proxy.url(heartbeat_s=1)})
            async with running_gateway(
                via_proxy,
                fake,
                shards=range(run.shards),
                shard_count=run.shards,
                reconnect_interval_s=0.5,
            ) as gateway:
                env["LTM_AMQP_URL"] = proxy.url(heartbeat_s=1)
                for slot in slots:
                    slot.start()
                await asyncio.gather(*(slot.wait_ready() for slot in slots))
                faults = asyncio.create_task(
                    inflict(
                        rng,
                        plan,
                        span=span,
                        slots=slots,
                        services=run.services,
                        proxy=proxy,
                        report=run.report,
                    )
                )
                requests = asyncio.create_task(
                    publish_data_requests(harness.publish, run.subjects, rng, span=span)
                )
                await publish_paced(harness, run.scenario.publishes, span)
                await requests
                await faults
                await asyncio.gather(*(slot.wait_ready() for slot in slots))
                await _settle_and_check(run, harness, [gateway], fake, slots)
    finally:
        for slot in slots:
            await slot.stop()
        await harness.stop()
        await delete_run_topology(run.settings, run.topology, run.shards)


async def _settle_and_check(
    run: _Run,
    harness: HarnessBroker,
    gateways: list[Gateway],
    fake: FakeDiscord,
    slots: list[WorkerSlot],
) -> None:
    planned, report = run.scenario.planned, run.report
    await settle_answers(
        harness,
        settings=run.settings,
        topology=run.topology,
        planned=planned,
        requests=request_ids(run.subjects),
        report=report,
        timeout=run.settle_timeout_s,
    )
    await settle_embeds(
        harness,
        idle=lambda: not any(gateway.shard_consumer.in_flight for gateway in gateways),
        fake=fake,
        database_url=run.services.database_url,
        topology=run.topology,
        planned=planned,
        shards=run.shards,
        timeout=run.settle_timeout_s,
    )
    await check_erasures(
        run.services.database_url, run.subjects, report, timeout=run.settle_timeout_s
    )
    if report.erasure_errors and run.services.vhost is not None:
        # Where a request not done may be: waiting in a queue, held unacknowledged, or nowhere.
        report.erasure_errors.append(
            "the run's queues then (ready, unacknowledged): "
            + await asyncio.to_thread(_queue_counts, run.services.vhost, run.settings.amqp_prefix)
        )
    for slot in slots:
        await slot.stop()
    await check_run(
        harness.collected,
        fake=fake,
        database_url=run.services.database_url,
        world=run.scenario.world,
        planned=planned,
        report=report,
        reply_ttl=timedelta(seconds=run.settings.reply_ttl_s),
    )
    report.log_errors = unexpected_log_lines(run.logs.glob("*.log"))
    report.failpoint_deaths = sum(slot.failpoint_deaths for slot in slots)
    report.harness_reconnects = harness.reconnects
    report.undecodable_events = harness.collected.undecodable


def _queue_counts(vhost: str, prefix: str) -> str:
    listed = rabbitmqctl(
        "list_queues", "-p", vhost, "name", "messages_ready", "messages_unacknowledged"
    ).stdout
    rows = (line.split("\t") for line in listed.splitlines())
    return "; ".join(
        f"{row[0]} {row[1]}, {row[2]}"
        for row in rows
        if len(row) == 3 and row[0].startswith(prefix)
    )
