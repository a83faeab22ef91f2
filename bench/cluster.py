"""The `cluster` phase: one worker on a three-node RabbitMQ cluster of the bench's own, every
queue replicated three ways, beside the same worker on the machine's single node.

The phase starts the cluster (`harness.localnodes.RabbitCluster`, in a temporary folder, on
ports and node names of its own; the machine's broker is never touched) and stops it at its
end, also after a failure. The worker there is told every node (`LTM_AMQP_URL`, the three
URLs comma-separated) and three replicas (`LTM_AMQP_REPLICAS=3`); the bench declares the same
topology, checks that the worker's queue has three members, and counts results and publishes
calls through the first node. Throughput: rounds in turns, a fresh worker on each side, as the
throughput phase; then the latency of each at 100 calls/s (`--cluster-rate`: the rate the
cluster's target is set at, `cluster_p99_ms_at_100` ≤ 3 × `single_node_p99_ms_at_100`), and at
the latency run's rate (`cluster_p99_ms`, `single_node_p99_ms`: at 200 calls/s the cluster on
one machine is at its limit). The cluster's nodes stay up (idle) during the single-node runs.

On one machine the three nodes share its cores with everything else, and every message is
written three times: the cluster is slower, and `cluster_ratio` says by how much. Its
throughput is reported, not held to a target; its tail at the lower rate is.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any, Final

import aio_pika

from bench.amqp import CallPublisher, ResultCounter, declare
from bench.rounds import Contender, paired_rounds, say
from bench.system import Bench, RunFigure
from bench.workers import worker_latency, worker_run
from bench.world import CallMaker
from contracts import Topology
from harness.localnodes import RabbitCluster

__all__ = [
    "CLUSTER_NODES",
    "ClusterPlan",
    "cluster_figures",
    "cluster_latency_figures",
    "cluster_rows",
    "cluster_worker_env",
    "measure_cluster",
    "own_cluster",
]

CLUSTER_NODES: Final = 3


@dataclass(frozen=True, slots=True)
class ClusterPlan:
    rounds: int
    calls: int
    warmup: int
    latency_rate: float
    latency_seconds: float
    target_rate: float = 100.0  # the rate of the cluster's latency target


def cluster_worker_env(urls: Sequence[str], replicas: int = CLUSTER_NODES) -> dict[str, str]:
    """What a worker on the cluster is told beyond the bench's environment."""
    return {"LTM_AMQP_URL": ",".join(urls), "LTM_AMQP_REPLICAS": str(replicas)}


@contextlib.asynccontextmanager
async def own_cluster(run_id: str) -> AsyncIterator[RabbitCluster]:
    """Three nodes of the bench's own, started for the block and stopped after it."""
    with tempfile.TemporaryDirectory(
        prefix=f"ltm-bench-cluster-{run_id}-", ignore_cleanup_errors=True
    ) as folder:
        cluster = RabbitCluster.plan(Path(folder), prefix=f"ltmb{run_id[:6]}", size=CLUSTER_NODES)
        starting = asyncio.ensure_future(asyncio.to_thread(cluster.start))
        try:
            await asyncio.shield(starting)  # a Ctrl-C meanwhile waits for the start, then stops
            yield cluster
        finally:
            await asyncio.wait([starting])
            await asyncio.to_thread(cluster.stop)


@contextlib.asynccontextmanager
async def _bench_on(cluster: RabbitCluster, single: Bench) -> AsyncIterator[Bench]:
    """The bench's connection, counter and publisher on the cluster's first node; the same
    database, folder and children as `single`."""
    url = cluster.amqp_urls()[0]
    services = dataclasses.replace(single.services, amqp_url=url, vhost=cluster.spec.vhost)
    topology = Topology(services.amqp_prefix, replicas=CLUSTER_NODES)
    connection = await aio_pika.connect(
        url, client_properties={"connection_name": "ltm-bench-cluster"}
    )
    try:
        await declare(connection, topology)
        members = await asyncio.to_thread(cluster.quorum_members, topology.worker_queue)
        if len(members) != CLUSTER_NODES:
            raise RuntimeError(f"the worker queue has {len(members)} replicas, not 3: {members}")
        counter = ResultCounter()
        await counter.start(connection, topology)
        yield Bench(
            services,
            connection,
            counter,
            await CallPublisher.open(connection, topology),
            single.workdir,
            window=single.window,
            max_run_seconds=single.max_run_seconds,
            children=single.children,
        )
    finally:
        await connection.close()


async def measure_cluster(
    single: Bench, calls: CallMaker, plan: ClusterPlan
) -> tuple[dict[str, Any], dict[str, Any], list[float]]:
    """The phase's results, its details (rounds, latencies), and the workers' peak RSS."""
    peaks: list[float] = []

    def fresh_worker(on: Bench, label: str, env: Mapping[str, str] | None) -> Contender:
        async def run(number: int) -> RunFigure:
            name = f"worker-{label}-{number}"
            figure, peak = await worker_run(on, plan, calls, name, prepublished=False, env=env)
            peaks.append(peak)
            return figure

        return run

    async with own_cluster(single.services.run_id) as cluster, _bench_on(cluster, single) as on:
        env = cluster_worker_env(cluster.amqp_urls())
        say(f"  cluster {[node.name for node in cluster.nodes]} up")
        rounds = await paired_rounds(
            plan.rounds,
            ("cluster", fresh_worker(on, "cluster", env)),
            ("single_node", fresh_worker(single, "single", None)),
        )
        # The target's rate first: the latency run's rate leaves the cluster a backlog.
        by_rate: dict[float, dict[str, dict[str, Any]]] = {}
        for rate in dict.fromkeys((plan.target_rate, plan.latency_rate)):
            latencies: dict[str, dict[str, Any]] = {}
            for label, bench, worker_env in (("single_node", single, None), ("cluster", on, env)):
                latency, peak = await worker_latency(
                    bench,
                    calls,
                    f"worker-latency-{label.replace('_', '-')}-{rate:g}",
                    rate=rate,
                    seconds=plan.latency_seconds,
                    warmup=plan.warmup,
                    env=worker_env,
                )
                peaks.append(peak)
                latencies[label] = latency.as_dict()
                say(f"  {label} at {latency.offered_rate:.0f}/s: p99 {latency.p99_ms:.1f} ms")
            by_rate[rate] = latencies
        details = {
            "nodes": cluster.describe()["nodes"],
            "rounds": rounds,
            "latency": by_rate[plan.latency_rate],
            f"latency_at_{plan.target_rate:g}": by_rate[plan.target_rate],
        }
    figures = cluster_figures(rounds, by_rate[plan.latency_rate])
    figures.update(cluster_latency_figures(by_rate[plan.target_rate], plan.target_rate))
    return figures, details, peaks


def cluster_latency_figures(
    latencies: Mapping[str, Mapping[str, Any]], rate: float
) -> dict[str, float]:
    """Each side's p99 at `rate`, named by it: `cluster_p99_ms_at_100`,
    `single_node_p99_ms_at_100`."""
    return {
        f"{label}_p99_ms_at_{rate:g}": round(float(latencies[label]["p99_ms"]), 2)
        for label in ("cluster", "single_node")
    }


def cluster_figures(
    rounds: Sequence[Mapping[str, Any]], latencies: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """The medians of the rounds (`cluster_ratio`: of each round's cluster over single-node
    rate), and each side's p99."""
    return {
        "cluster_tps": round(float(median(r["cluster"]["tps"] for r in rounds)), 1),
        "single_node_tps": round(float(median(r["single_node"]["tps"] for r in rounds)), 1),
        "cluster_ratio": round(float(median(r["ratio"] for r in rounds)), 3),
        "cluster_p99_ms": round(float(latencies["cluster"]["p99_ms"]), 2),
        "single_node_p99_ms": round(float(latencies["single_node"]["p99_ms"]), 2),
    }


def cluster_rows(results: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The raw table's rows (figure, measured): each figure single node | cluster, and the
    ratio. The cluster's target is the summary's (`bench.summary`)."""

    def pair(single: str, cluster: str, unit: str) -> str:
        values = (results.get(single), results.get(cluster))
        shown = ["-" if value is None else f"{value:,.1f}" for value in values]
        return f"{shown[0]} | {shown[1]}{unit}"

    ratio = results.get("cluster_ratio")
    return [
        (
            "single node | 3-node cluster: throughput",
            pair("single_node_tps", "cluster_tps", " /s"),
        ),
        ("single node | 3-node cluster: p99", pair("single_node_p99_ms", "cluster_p99_ms", " ms")),
        ("cluster_ratio (3 replicas, one machine)", "-" if ratio is None else f"{ratio:.2f}"),
        (
            "single node | 3-node cluster: p99 at 100 calls/s",
            pair("single_node_p99_ms_at_100", "cluster_p99_ms_at_100", " ms"),
        ),
    ]
