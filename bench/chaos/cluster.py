"""`python -m bench.chaos.cluster` (`make chaos-cluster`): the chaos run on a cluster of our
own, started and stopped by the run: three RabbitMQ nodes and a PostgreSQL primary with a
synchronous standby (`harness.localnodes`; the machine's own broker and database are never
touched, and checked unchanged at the end).

Several publishers, two or more workers and two gateways (real `ltm` processes, the gateways
posting to the fake Discord), each connected first to another node (`LTM_AMQP_URL` lists every
node, from a different one each) and every queue 3-way replicated (`LTM_AMQP_REPLICAS=3`); the
database URL names both PostgreSQL hosts with `target_session_attrs=read-write`. During the
run the node leading the worker queue is SIGKILLed and restarted, later a follower, then the
PostgreSQL primary is SIGKILLed and its standby promoted. Then the checks of `make chaos`, the
processes' survival, and for each kill the time to the first answer of a call published
after it.
`run_cluster_chaos` is the same run on nodes the caller started (tests/e2e/test_chaos_cluster.py).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import secrets
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from bench.chaos.broker import HarnessBroker
from bench.chaos.checks import UNRECORDED, check_run, unexpected_log_lines
from bench.chaos.cluster_faults import NodeFaults, PublishGates, recovery_after
from bench.chaos.report import ChaosReport, print_report
from bench.chaos.runner import Scenario, prepare, worker_env
from bench.chaos.settle import settle_answers, settle_embeds
from bench.chaos.workers import WorkerSlot
from harness.fake_discord import FakeDiscord
from harness.localnodes import PostgresPair, RabbitCluster
from harness.localnodes.running import MachineServices, started_cluster, started_pair
from harness.services import TestServices
from infra.observability.logs import configure_logging
from infra.settings import Settings
from infra.storage.database import migrate, with_database_name

__all__ = ["ClusterShape", "main", "rotated", "run_cluster_chaos"]

REPLICAS = 3


@dataclass(frozen=True)
class ClusterShape:
    """How many of each process, and the bot's shards (split between the gateways)."""

    workers: int = 2
    gateways: int = 2
    publishers: int = 3
    shards: int = 2


def rotated(urls: Sequence[str], start: int) -> str:
    """Every node's URL, beginning with node `start` (modulo their number): a process's own
    first node, and the others to fail over to."""
    first = start % len(urls)
    return ",".join([*urls[first:], *urls[:first]])


@dataclass
class _ClusterRun:
    """What the steps of one cluster run share."""

    cluster: RabbitCluster
    services: TestServices
    settings: Settings
    scenario: Scenario
    report: ChaosReport
    logs: Path
    shape: ClusterShape
    settle_timeout_s: float

    @property
    def urls(self) -> list[str]:
        return self.cluster.amqp_urls()

    def node_settings(self, start: int) -> Settings:
        return self.settings.model_copy(update={"amqp_url": rotated(self.urls, start)})


async def run_cluster_chaos(
    cluster: RabbitCluster,
    pair: PostgresPair,
    *,
    calls: int = 3000,
    shape: ClusterShape = ClusterShape(),
    publish_s: float | None = None,
    duplicates: float = 0.1,
    seed: int | None = None,
    log_dir: Path | None = None,
    settle_timeout_s: float = 120.0,
    db_retry_s: float = 15.0,
    hold_s: float = 5.0,
) -> ChaosReport:
    """One cluster chaos run on `cluster` and `pair`, already started; both are left running
    (the killed node restarted; the standby promoted, the old primary down)."""
    started = time.monotonic()
    rng = random.Random(seed)
    run_id = uuid.uuid4().hex[:8]
    logs = log_dir or Path(tempfile.mkdtemp(prefix="ltm-chaos-cluster-"))
    logs.mkdir(parents=True, exist_ok=True)
    database_url = with_database_name(pair.url(), f"ltm_chaos_{run_id}")
    await asyncio.to_thread(migrate, database_url)
    services = TestServices(
        run_id=run_id,
        database_url=database_url,
        amqp_url=",".join(cluster.amqp_urls()),
        amqp_prefix=f"ltmc{run_id}",
        vhost=cluster.spec.vhost,
    )
    settings = Settings(
        database_url=database_url,
        amqp_url=services.amqp_url,
        amqp_prefix=services.amqp_prefix,
        amqp_replicas=REPLICAS,
        metrics_port=0,
    )
    scenario = await prepare(
        database_url, rng, calls=calls, shards=shape.shards, duplicates=duplicates
    )
    report = ChaosReport(db_fault_kind="failover", log_dir=str(logs))
    scenario.count_into(report)
    run = _ClusterRun(cluster, services, settings, scenario, report, logs, shape, settle_timeout_s)
    env = worker_env(services.amqp_prefix, scenario.world, db_retry_s=db_retry_s)
    env.update(LTM_AMQP_REPLICAS=str(REPLICAS), LTM_SHARD_COUNT=str(shape.shards))
    faults = NodeFaults(cluster, pair, settings.topology.worker_queue, hold_s=hold_s)
    span = publish_s if publish_s is not None else max(30.0, calls / 50)
    await _run_with_kills(run, env, faults, span)
    report.duration_s = time.monotonic() - started
    return report


def _slots(run: _ClusterRun, env: dict[str, str], fake: FakeDiscord) -> list[WorkerSlot]:
    """The workers, then the gateways, each starting at the next node."""
    shape, slots = run.shape, []
    for n in range(shape.workers):
        own = {**env, "LTM_AMQP_URL": rotated(run.urls, n)}
        slots.append(WorkerSlot(f"worker{n}", run.services, own, run.logs))
    for g in range(shape.gateways):
        shards = [s for s in range(shape.shards) if s % shape.gateways == g]
        own = {
            **env,
            "LTM_AMQP_URL": rotated(run.urls, shape.workers + g),
            "DISCORD_TOKEN": "fake-token-chaos",
            "DISCORD_API_URL": fake.url,
        }
        served = ",".join(map(str, shards))
        args = ("gateway", "--shards", served, "--shard-count", str(shape.shards))
        slots.append(WorkerSlot(f"gateway{g}", run.services, own, run.logs, args=args))
    return slots


async def _run_with_kills(
    run: _ClusterRun, env: dict[str, str], faults: NodeFaults, span: float
) -> None:
    topology = run.settings.topology
    tap = HarnessBroker(run.node_settings(0), topology, name="chaos-tap")
    publishers = [
        HarnessBroker(run.node_settings(n), topology, name=f"chaos-publisher{n}", tap=False)
        for n in range(run.shape.publishers)
    ]
    await tap.start()
    await asyncio.gather(*(publisher.start() for publisher in publishers))
    slots: list[WorkerSlot] = []
    try:
        async with FakeDiscord() as fake:
            slots = _slots(run, env, fake)
            for slot in slots:
                slot.start()
            await asyncio.gather(*(slot.wait_ready() for slot in slots))
            gates = PublishGates(len(run.scenario.publishes))
            striking = asyncio.create_task(faults.run(gates))
            published = await _publish_spread(publishers, run.scenario, span, gates)
            await striking
            await asyncio.gather(*(slot.wait_ready(timeout=120) for slot in slots))
            await _settle_and_check(run, tap, fake, slots, faults)
            run.report.node_kills = _recoveries(faults, published, tap)
    finally:
        for slot in slots:
            await slot.stop()
        for broker in (tap, *publishers):
            await broker.stop()


async def _publish_spread(
    publishers: list[HarnessBroker], scenario: Scenario, span: float, gates: PublishGates
) -> dict[str, float]:
    """At a steady pace (`span` seconds for all, the waits at the gates aside), each publish
    by the next publisher in turn; when each call was first published."""
    interval = span / len(scenario.publishes)
    published: dict[str, float] = {}
    due = time.monotonic()
    for n, publish in enumerate(scenario.publishes):
        await gates.before(n)
        due = max(due + interval, time.monotonic())
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        published.setdefault(publish.message.tool_call_id, time.monotonic())
        await publishers[n % len(publishers)].publish(publish.message)
    return published


async def _settle_and_check(
    run: _ClusterRun,
    tap: HarnessBroker,
    fake: FakeDiscord,
    slots: list[WorkerSlot],
    faults: NodeFaults,
) -> None:
    planned, report, topology = run.scenario.planned, run.report, run.settings.topology
    await settle_answers(
        tap,
        settings=run.settings,
        topology=topology,
        planned=planned,
        requests=(),
        report=report,
        timeout=run.settle_timeout_s,
    )
    await settle_embeds(
        tap,
        idle=lambda: True,  # the gateways are stopped (gracefully) before the checks
        fake=fake,
        database_url=run.services.database_url,
        topology=topology,
        planned=planned,
        shards=run.shape.shards,
        timeout=run.settle_timeout_s,
    )
    report.survival_errors = _deaths(slots)
    for slot in slots:
        await slot.stop()
    await check_run(
        tap.collected,
        fake=fake,
        database_url=run.services.database_url,
        world=run.scenario.world,
        planned=planned,
        report=report,
        reply_ttl=timedelta(seconds=run.settings.reply_ttl_s),
    )
    report.log_errors = unexpected_log_lines(run.logs.glob("*.log"))
    report.harness_reconnects = tap.reconnects
    report.undecodable_events = tap.collected.undecodable
    report.kills = len(faults.struck)
    report.db_faults = sum("PostgreSQL" in what for what, _ in faults.struck)


def _recoveries(
    faults: NodeFaults, published: dict[str, float], tap: HarnessBroker
) -> list[tuple[str, float | None]]:
    answers = [
        (at, call) for at, call, status in tap.collected.arrivals if status not in UNRECORDED
    ]
    return [(what, recovery_after(at, published, answers)) for what, at in faults.struck]


def _deaths(slots: list[WorkerSlot]) -> list[str]:
    """Every process that exited while the run went on, with the end of its log."""
    found = []
    for slot in slots:
        for incarnation, code in enumerate(slot.exits, start=1):
            log = slot.logs / f"{slot.name}-{incarnation}.log"
            tail = log.read_text(errors="replace").splitlines()[-5:] if log.exists() else []
            found.append(f"{slot.name} exited with code {code}: " + " | ".join(tail)[-600:])
    return found


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.chaos.cluster",
        description="Tool calls on a three-node broker cluster and a PostgreSQL pair of our "
        "own while the queue's leader, a follower and the database primary are SIGKILLed.",
    )
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--gateways", type=int, default=2)
    parser.add_argument("--publishers", type=int, default=3)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--publish-seconds", type=float, default=None)
    parser.add_argument(
        "--hold-seconds", type=float, default=5.0, help="how long a killed node stays down"
    )
    parser.add_argument("--seed", type=int, default=None)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    configure_logging("WARNING", "console")
    for noisy in ("aiormq", "aio_pika"):
        logging.getLogger(noisy).setLevel(logging.CRITICAL)
    machine = MachineServices.now()
    shape = ClusterShape(args.workers, args.gateways, args.publishers, args.shards)
    password = secrets.token_hex(12)
    with (
        started_cluster(size=3, user="ltm", password=password, vhost="ltm") as cluster,
        started_pair() as pair,
    ):
        report = asyncio.run(
            run_cluster_chaos(
                cluster,
                pair,
                calls=args.calls,
                shape=shape,
                publish_s=args.publish_seconds,
                hold_s=args.hold_seconds,
                seed=seed,
            )
        )
    if MachineServices.now() != machine:
        report.survival_errors.append("the machine's own broker or database changed")
    heading = f"cluster chaos run, seed {seed}, process logs in {report.log_dir}"
    return print_report(report, heading)


if __name__ == "__main__":
    sys.exit(main())
