"""`make bench`: the worker measured against the limits of its parts and against a peer.

    python -m bench.run [--calls N] [--peer-calls N] [--db-seconds S] ...   (see --help)

One run, on the local PostgreSQL and RabbitMQ, in a database and a virtual host of its own
(removed at the end, also after a failure or Ctrl-C):

1. `db_limit_tps`: the worker's SQL for one successful update, in a psycopg loop, with 1, 4
   and 16 clients (`db_limit_tps` is the 1-client figure; `db_limit_tps_4`, `_16`); and
   `db_limit_batched_tps`, 2 clients with 32 calls per transaction, as the worker batches.
2. `peer_tps`: a FastStream consumer doing the same transaction and events (`bench.peer`).
3. `throughput` and `broker_limit_tps`, in rounds: a fresh worker (`python -m ltm
   worker`) and the broker-limit loop (`bench.broker_loop`: consume a call, publish the
   worker's events confirmed, ack; no database; aio-pika's `Exchange.publish`) take turns,
   each answering N calls that a separate process publishes meanwhile, after a warm-up, at
   the worker's prefetch. The machine's speed drifts within minutes, so each round's ratio
   is taken on its own, and `ratio_vs_broker` is their median (the figures, medians too).
4. `broker_limit_aiormq_tps`, the same loop on aiormq with `wait=False`, the AMQP path the
   worker itself takes; `broker_limit_prepublished_tps` and `throughput_prepublished`, the
   loop and a fresh worker each on a queue filled before it starts, in rounds as in 3
   (`ratio_vs_broker_prepublished` the median of the rounds'); in the same rounds,
   `replay_tps`: a fresh worker answering `--replay-letters` dead-lettered calls (10,000;
   published to the dead-letter exchange as the worker gives calls up) that
   `ltm dlq replay --all --rate 0` sends back to it, from the first result to the last
   (`ratio_vs_broker_replay`, over the loop on a full queue, the median of the rounds').
5. Publish-to-result latency at a fixed 200 calls/s (p50, p95, p99), on a fresh worker,
   after its warm-up, once the machine has settled (`bench.machine.settle`); and the floor
   (`latency_floor_p50_ms` … `_p99_ms`): the broker loop of 3 driven the same way, at the same
   rate: what the broker and the bench alone leave of the tail; and the committing floor
   (`latency_committed_floor_p50_ms` … `_p99_ms`): the same loop committing each call's
   update with the worker's own statements first, batched by the worker's own batcher
   (`bench.broker_loop --database-url`): what committing before answering adds, with none of
   the worker's pipeline. In rounds, the contenders taking turns; each percentile is the median of
   the rounds'.
5b. The same two figures for the create tool (`create_throughput`, `create_ratio_vs_broker`
   against the broker loop publishing a creation's events; `create_p50_ms` … `create_p99_ms`),
   against the same targets (the latency in the rounds of 5, a fourth contender, so that the
   update's tail is compared with a create's measured beside it): each call saves a new server
   memory in a server kept for the creations (`--create-servers` of them, each holding
   `--create-seeded` memories before a run, so that a run's creations stay under the limit;
   what they saved is removed between runs).
5c. Tracing off, at the default sampling, and with every call sampled, side by side
   (`tracing_off_tps`, `tracing_default_tps`, `tracing_on_tps` in rounds as in 3, but
   `--tracing-rounds` of them; `tracing_default_vs_off` and `tracing_on_vs_off`, each round's
   ratio, the median; each worker's CPU per call from its first result to its last,
   `tracing_<label>_worker_cpu_ms` and `tracing_<label>_worker_cpu_vs_off` the same way; then
   `tracing_<off|default|on>_p50_ms` / `_p99_ms` at the latency run's rate): the traced
   workers export over OTLP/HTTP to endpoints of the bench's own that drop the spans
   (`bench.span_sink`), so that their cost is the whole of tracing. `default` sets no
   `OTEL_TRACES_SAMPLER` (the worker's own default decides), `on` sets
   `parentbased_always_on`; the bench's calls carry no `traceparent` and no `OTEL_*` of the
   shell reaches its processes, so a parent-based sampler has no caller's flag to follow.
   In the same rounds the untraced worker runs a second time (`tracing_off_again_vs_off`, no
   target): a ratio that should be 1, which says how far the rounds move on their own.
   Then the four workers side by side, consuming one queue filled with `--shared-calls`
   calls (60,000) before they start, in `--rounds` rounds (`bench.shared_queue`):
   `tracing_shared_<label>_tps` and `_worker_cpu_ms` over the same window, and
   `tracing_shared_<default|on|off_again>_vs_off` and `_worker_cpu_vs_off`, each round's
   ratio, the median. Whatever slows the machine slows the four alike, so these resolve what
   the rounds taken in turns cannot.
5d. Updates carrying `context.seen` of 25 entries (the target at its current revision, so
   that each applies) against the same updates without, side by side (`seen_25_tps` /
   `none_tps` and `seen_25_vs_none_throughput` in paired rounds as in 3, then `seen_25_p50_ms`
   … `none_p99_ms` at the latency run's rate): what the comparison of the revision the LLM
   was shown costs an update.
6. `cost_1m_vs_10k`: time per call with 1M stored memories over time per call with 10k,
   the 1M in a second database, the two taking turns in rounds as in 3 (the median).
6b. Scaling (`bench.scaling`): `scaling_tps` with 1, 2 and 4 workers (`--scaling-workers`) on
   the machine's broker, in rounds taken in turns, and `scaling_vs_1`, each count's rate over
   the 1-worker rate of its round; for each count, `cpu_ms_per_call`, the CPU per call
   answered of the workers, the broker (its Erlang VM), the database (the postmaster and its
   backends), the bench (this process and the publisher) and `other` (the rest of the
   machine), with the machine's `total`, and `scaling_busy_share`, how busy its cores were:
   from /proc, read-only, over each run's sustained part (`bench.cpu`). Then the same workers
   at a fixed 150 calls/s (`--scaling-rate`), below saturation:
   `scaling_fixed_rate_cpu_ms_per_call` and `scaling_fixed_rate_cost_vs_1` (the broker's plus
   the database's CPU per call over one worker's, within each round, the median). Before the
   rounds, `idle_worker_core_share`: the share of a core one ready worker given no call uses
   over 10 s.
6c. Cluster (`bench.cluster`): one worker on a three-node RabbitMQ cluster of the bench's own
   (started and stopped by the phase, in a temporary folder; every queue replicated 3 ways,
   `LTM_AMQP_URL` listing the three nodes), and the same worker on the machine's single node,
   in rounds taken in turns: `cluster_tps`, `single_node_tps`, `cluster_ratio` (cluster over
   single node, the median of the rounds'), then `cluster_p99_ms_at_100` and
   `single_node_p99_ms_at_100` at 100 calls/s (`--cluster-rate`; the cluster's target:
   ≤ 3 × the single node's), and `cluster_p99_ms` and `single_node_p99_ms` at the latency
   run's rate. On one machine the cluster is slower: its throughput is reported, no target.
7. `rss_mb`: the highest peak RSS (VmHWM) of all the worker processes of the run with tracing
   off; `tracing_on_rss_mb`, that of the traced ones (the SDK and its exporter loaded).

Prints a table of the raw figures (each result's key and its value; no target, no met), then
the summary (`bench.summary`: figure, measured, target, met yes / no / –; the targets are
judged there only, and a missed target does not fail the run), and writes `bench/results.json`
with `targets`, `summary` and the machine's description; the results page's table of the
newest run is made from it (`bench.results_page`). Exit status 1 only when a phase could not
be measured.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import median
from typing import Any, Final

import aio_pika
import orjson

from bench import db_limit, erasure
from bench.amqp import CallPublisher, ResultCounter, declare
from bench.cluster import ClusterPlan, cluster_rows, measure_cluster
from bench.machine import describe, machine_line
from bench.processes import Child
from bench.rounds import (
    Contender,
    LatencyContender,
    latency_rounds,
    median_cpu,
    median_cpu_ratio,
    median_percentiles,
    median_rate,
    median_ratio,
    paired_medians,
    paired_rounds,
    rounds_against,
    say,
)
from bench.samples import Sample, capture
from bench.scaling import ScalingPlan, measure_scaling, scaling_rows
from bench.services import BenchServices, bench_services
from bench.shared_queue import SharedQueuePlan, measure_shared_queue, shared_queue_figures
from bench.span_sink import SpanSink
from bench.summary import evaluate, summary_rows, text_table
from bench.system import Bench, LatencyFigure, RunFigure, latency_run, throughput_run
from bench.workers import (
    answered_by,
    run_timeout,
    start_worker,
    worker_latency,
    worker_replay,
    worker_run,
)
from bench.world import (
    CallMaker,
    SeenUpdates,
    creations_of,
    grow_memories,
    memory_count,
    pick_create_targets,
    pick_targets,
    reset_calls,
    seed_create_servers,
    seed_servers,
    updates_of,
)
from contracts import MemoryStatus
from infra.settings import Settings
from infra.storage.database import drop_database, migrate, with_database_name

__all__ = ["Config", "main", "render_table", "run_bench"]

RESULTS_PATH = Path(__file__).with_name("results.json")
# The memories a seen-carrying update names (`seen` phase): a context's 25 server memories.
_SEEN_ENTRIES: Final = 25
# Every consumer measured (the worker, the broker loop, the peer) takes as many calls at once.
_WORKER_PREFETCH: Final = Settings().prefetch
# In the order they run; the sample phase always runs, since the others replay its events.
PHASES: Final = (
    "db_limit",
    "peer",
    "throughput",
    "broker_limit_aiormq",
    "prepublished",
    "latency",
    "tracing",
    "seen",
    "create_throughput",
    "cost_1m_vs_10k",
    "scaling",
    "cluster",
    "erasure",
    "rss",
)


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def _env_float(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


@dataclass(frozen=True)
class Config:
    calls: int
    peer_calls: int
    rounds: int
    tracing_rounds: int
    shared_calls: int
    warmup: int
    db_seconds: float
    db_clients: tuple[int, ...]
    db_batch: int
    servers: int
    memories: int
    big_memories: int
    latency_rate: float
    latency_seconds: float
    create_servers: int
    create_seeded: int
    window: int
    run_seconds: float
    replay_letters: int
    scaling_workers: tuple[int, ...]
    scaling_rate: float
    scaling_rate_seconds: float
    cluster_rate: float
    phases: tuple[str, ...]
    output: Path


def parse_args(argv: list[str] | None = None) -> Config:
    parser = argparse.ArgumentParser(
        prog="python -m bench.run",
        description="Measure the worker against the database and broker limits and a peer.",
    )
    add = parser.add_argument
    add("--calls", type=int, default=_env_int("BENCH_CALLS", 6_000),
        help="calls per throughput run, worker or broker loop (env BENCH_CALLS)")  # fmt: skip
    add("--peer-calls", type=int, default=_env_int("BENCH_PEER_CALLS", 5_000),
        help="calls for the FastStream peer (env BENCH_PEER_CALLS)")  # fmt: skip
    add("--rounds", type=int, default=_env_int("BENCH_ROUNDS", 3),
        help="broker-loop and worker runs, taken in turns; the ratio is their median"
        " (env BENCH_ROUNDS)")  # fmt: skip
    add("--tracing-rounds", type=int, default=_env_int("BENCH_TRACING_ROUNDS", 0),
        help="rounds of the tracing phase; 0: three times --rounds, since its default"
        " sampling's target leaves the least room, and single rounds of the same worker"
        " move by more than it (env BENCH_TRACING_ROUNDS)")  # fmt: skip
    add("--shared-calls", type=int, default=_env_int("BENCH_SHARED_CALLS", 60_000),
        help="calls in the queue the tracing phase's workers share, side by side, in each of"
        " --rounds rounds: the longer their window, the less a round moves"
        " (env BENCH_SHARED_CALLS)")  # fmt: skip
    add("--warmup", type=int, default=_env_int("BENCH_WARMUP", 300),
        help="calls answered before each timed run (env BENCH_WARMUP)")  # fmt: skip
    add("--db-seconds", type=float, default=_env_float("BENCH_DB_SECONDS", 5.0),
        help="seconds per database-limit figure (env BENCH_DB_SECONDS)")  # fmt: skip
    add("--db-clients", default=os.environ.get("BENCH_DB_CLIENTS", "1,4,16"),
        help="client counts of the database limit (env BENCH_DB_CLIENTS)")  # fmt: skip
    add("--db-batch", type=int, default=_env_int("BENCH_DB_BATCH", 32),
        help="calls per transaction of the extra batched figure, 2 clients; 0 skips it"
        " (env BENCH_DB_BATCH)")  # fmt: skip
    add("--servers", type=int, default=_env_int("BENCH_SERVERS", 100),
        help="guilds the memories are spread over (env BENCH_SERVERS)")  # fmt: skip
    add("--memories", type=int, default=_env_int("BENCH_MEMORIES", 10_000),
        help="stored memories for every run but the large one (env BENCH_MEMORIES)")  # fmt: skip
    add("--big-memories", type=int, default=_env_int("BENCH_BIG_MEMORIES", 1_000_000),
        help="stored memories of the large run; 0 skips it (env BENCH_BIG_MEMORIES)")  # fmt: skip
    add("--latency-rate", type=float, default=_env_float("BENCH_LATENCY_RATE", 200.0),
        help="offered calls/s of the latency run (env BENCH_LATENCY_RATE)")  # fmt: skip
    add("--latency-seconds", type=float, default=_env_float("BENCH_LATENCY_SECONDS", 15.0),
        help="length of the latency run (env BENCH_LATENCY_SECONDS)")  # fmt: skip
    add("--create-servers", type=int, default=_env_int("BENCH_CREATE_SERVERS", 0),
        help="servers the create tool's calls go to; 0: enough for a run's calls to fit"
        " (env BENCH_CREATE_SERVERS)")  # fmt: skip
    add("--create-seeded", type=int, default=_env_int("BENCH_CREATE_SEEDED", 10),
        help="memories each of those servers holds before a run"
        " (env BENCH_CREATE_SEEDED)")  # fmt: skip
    add("--window", type=int, default=_env_int("BENCH_WINDOW", 256),
        help="outstanding publisher confirms of the bench's publishers")  # fmt: skip
    add("--run-seconds", type=float, default=_env_float("BENCH_RUN_SECONDS", 45.0),
        help="a throughput run stops counting after this long (env BENCH_RUN_SECONDS)")  # fmt: skip
    add("--replay-letters", type=int, default=_env_int("BENCH_REPLAY_LETTERS", 10_000),
        help="dead letters `ltm dlq replay` sends back in each round of the backlog phase;"
        " 0 skips the replay (env BENCH_REPLAY_LETTERS)")  # fmt: skip
    add("--scaling-workers", default=os.environ.get("BENCH_SCALING_WORKERS", "1,2,4"),
        help="worker counts of the scaling phase (env BENCH_SCALING_WORKERS)")  # fmt: skip
    add("--scaling-rate", type=float, default=_env_float("BENCH_SCALING_RATE", 150.0),
        help="offered calls/s of the scaling phase's fixed-rate runs, below saturation; 0 skips"
        " them (env BENCH_SCALING_RATE)")  # fmt: skip
    add("--scaling-rate-seconds", type=float,
        default=_env_float("BENCH_SCALING_RATE_SECONDS", 15.0),
        help="length of each fixed-rate run (env BENCH_SCALING_RATE_SECONDS)")  # fmt: skip
    add("--cluster-rate", type=float, default=_env_float("BENCH_CLUSTER_RATE", 100.0),
        help="offered calls/s of the cluster phase's latency target, beside the latency run's"
        " rate (env BENCH_CLUSTER_RATE)")  # fmt: skip
    add("--phases", default=os.environ.get("BENCH_PHASES", ",".join(PHASES)),
        help="phases to run, comma-separated; they run in their fixed order"
        " (env BENCH_PHASES)")  # fmt: skip
    add("--output", type=Path, default=Path(os.environ.get("BENCH_OUTPUT", RESULTS_PATH)))
    args = parser.parse_args(argv)
    return Config(
        calls=args.calls,
        peer_calls=args.peer_calls,
        rounds=args.rounds,
        tracing_rounds=args.tracing_rounds or 3 * args.rounds,
        shared_calls=args.shared_calls,
        warmup=args.warmup,
        db_seconds=args.db_seconds,
        db_clients=_counts(args.db_clients),
        db_batch=args.db_batch,
        servers=args.servers,
        memories=args.memories,
        big_memories=args.big_memories,
        latency_rate=args.latency_rate,
        latency_seconds=args.latency_seconds,
        create_servers=args.create_servers or _create_servers_for(args),
        create_seeded=args.create_seeded,
        window=args.window,
        run_seconds=args.run_seconds,
        replay_letters=args.replay_letters,
        scaling_workers=_counts(args.scaling_workers),
        scaling_rate=args.scaling_rate,
        scaling_rate_seconds=args.scaling_rate_seconds,
        cluster_rate=args.cluster_rate,
        phases=tuple(name.strip() for name in args.phases.split(",") if name.strip()),
        output=args.output,
    )


def _counts(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(",") if part.strip())


def _create_servers_for(args: argparse.Namespace) -> int:
    """Enough servers that the most calls of a run (and its warm-up) leave every one of them
    under the create tool's limit (LTM_MAX_SERVER_MEMORIES, 25 by default), with room to
    spare."""
    room = max(1, Settings().max_server_memories - int(args.create_seeded) - 3)
    most = max(int(args.calls), round(args.latency_rate * args.latency_seconds)) + args.warmup
    return max(10, -(-int(most) // room))


class Phases:
    """Runs each phase; a failing one is recorded and the rest still run."""

    def __init__(self, wanted: Sequence[str] = PHASES) -> None:
        unknown = set(wanted) - set(PHASES)
        if unknown:
            raise ValueError(f"unknown phases {sorted(unknown)}; the phases are {PHASES}")
        self._wanted = set(wanted)
        self.errors: dict[str, str] = {}
        self.seconds: dict[str, float] = {}

    def wanted(self, name: str) -> bool:
        return name in self._wanted

    @contextlib.asynccontextmanager
    async def phase(self, name: str) -> AsyncIterator[None]:
        say(f"{name} ...")
        started = time.perf_counter()
        try:
            yield
        except Exception as error:
            self.errors[name] = f"{type(error).__name__}: {error}"
            traceback.print_exc()
            say(f"{name} FAILED: {self.errors[name].splitlines()[0]}")
        finally:
            self.seconds[name] = round(time.perf_counter() - started, 1)


def _broker_loop_child(
    bench: Bench, name: str, sample_path: Path, *options: str
) -> tuple[Child, Path]:
    """The broker-limit loop's process (not started) at the worker's prefetch, publishing the
    events of the sample at `sample_path`, and the file it writes once it consumes."""
    services, ready = bench.services, bench.workdir / f"{name}.ready"
    loop = bench.child(
        name,
        "bench.broker_loop",
        "--amqp-url",
        services.amqp_url,
        "--prefix",
        services.amqp_prefix,
        "--sample",
        str(sample_path),
        "--prefetch",
        str(_WORKER_PREFETCH),
        "--ready-file",
        str(ready),
        *options,
        env=services.env(),
    )
    return loop, ready


async def _broker_loop(
    bench: Bench,
    config: Config,
    sample_path: Path,
    calls: CallMaker,
    *,
    publish: str,
    prepublished: bool,
    label: str = "",
) -> RunFigure:
    """The broker-limit loop, driven and counted exactly as the worker is in the same mode,
    publishing the events of the sample at `sample_path`."""
    name = f"broker{label}-{publish}" + ("-prepub" if prepublished else "")
    loop, ready = _broker_loop_child(bench, name, sample_path, "--publish", publish)
    try:
        if not prepublished:
            loop.start()
            await loop.wait_file(ready)
        return await answered_by(bench, config, calls, loop, prepublished=prepublished)
    finally:
        await loop.terminate()


async def _latency_floor(
    bench: Bench,
    config: Config,
    sample_path: Path,
    calls: CallMaker,
    *,
    database_url: str | None = None,
) -> LatencyFigure:
    """The broker-limit loop driven as the worker's latency run is (same rate, warm-up,
    settling, publish to result at this process): the latency the broker and the bench
    alone leave, with no database and no worker code; with `database_url`, the loop commits
    each call's update there first (`bench.broker_loop`'s committing loop)."""
    options = () if database_url is None else ("--database-url", database_url)
    name = "broker-floor" if database_url is None else "broker-committed-floor"
    loop, ready = _broker_loop_child(bench, name, sample_path, *options)
    loop.start()
    try:
        await loop.wait_file(ready)
        figure = await latency_run(
            bench,
            calls,
            rate=config.latency_rate,
            seconds=config.latency_seconds,
            warmup=config.warmup,
            timeout=run_timeout(int(config.latency_rate * config.latency_seconds)),
        )
        loop.check_alive()
        return figure
    finally:
        await loop.terminate()


async def run_bench(config: Config, services: BenchServices) -> dict[str, Any]:
    """Every phase, in order; returns the results document."""
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    started = time.perf_counter()
    phases = Phases(config.phases)
    results: dict[str, Any] = {"config": {**asdict(config), "output": str(config.output)}}
    details: dict[str, Any] = {}
    workdir = Path(tempfile.mkdtemp(prefix=f"ltm-bench-{services.run_id}-"))
    say(f"database {services.database_url}, vhost {services.vhost}, logs in {workdir}")
    url = services.database_url
    connection = await aio_pika.connect(
        services.amqp_url, client_properties={"connection_name": "ltm-bench"}
    )
    bench: Bench | None = None
    try:
        results["machine"] = await describe(url, connection)
        await declare(connection, services.topology)
        counter = ResultCounter()
        await counter.start(connection, services.topology)
        tool_calls = await CallPublisher.open(connection, services.topology)
        bench = Bench(
            services,
            connection,
            counter,
            tool_calls,
            workdir,
            window=config.window,
            max_run_seconds=config.run_seconds,
        )

        await seed_servers(url, config.servers)
        seeded = await grow_memories(url, config.memories)
        say(f"seeded {config.memories} memories over {config.servers} servers in {seeded:.1f}s")
        most = max(config.calls, config.peer_calls, config.memories)
        targets = await pick_targets(url, most, seed=1)
        updates = updates_of(targets)
        creations: CallMaker | None = None
        if phases.wanted("create_throughput") or phases.wanted("latency"):
            await seed_create_servers(
                url, config.create_servers, memories_each=config.create_seeded
            )
            creations = creations_of(await pick_create_targets(url))
            say(
                f"seeded {config.create_servers} servers for creations,"
                f" {config.create_seeded} memories each"
            )

        sample: Sample | None = None
        sample_path = workdir / "sample.json"
        async with phases.phase("sample"):
            sampler = await start_worker(bench, "worker-sample")
            try:
                sample = await capture(connection, services.topology, url, updates)
            finally:
                await sampler.terminate()
            details["events_per_call"] = len(sample.events)
            details["event_sizes"] = sample.sizes()
            sample_path.write_bytes(sample.to_json())

        if phases.wanted("db_limit"):
            async with phases.phase("db_limit"):
                assert sample is not None, "no sample events"
                db_figures: dict[int, db_limit.DbFigure] = {}
                for clients in config.db_clients:
                    await reset_calls(url)
                    db_figure = await db_limit.measure(
                        url, targets, sample, clients=clients, seconds=config.db_seconds
                    )
                    db_figures[clients] = db_figure
                    say(f"  db limit, {clients} client(s): {db_figure.tps:.0f} calls/s")
                details["db_limit"] = [db_limit.as_dict(f) for f in db_figures.values()]
                if 1 in db_figures:
                    results["db_limit_tps"] = round(db_figures[1].tps, 1)
                for clients, db_figure in db_figures.items():
                    if clients != 1:
                        results[f"db_limit_tps_{clients}"] = round(db_figure.tps, 1)
                if config.db_batch > 1:
                    # Beyond the brief: what the worker's batched statements allow when several
                    # calls share a transaction (2 transactions at a time, as the worker runs).
                    await reset_calls(url)
                    batched = await db_limit.measure(
                        url,
                        targets,
                        sample,
                        clients=2,
                        batch=config.db_batch,
                        seconds=config.db_seconds,
                        warmup=3,
                    )
                    details["db_limit"].append(db_limit.as_dict(batched))
                    results["db_limit_batched_tps"] = round(batched.tps, 1)
                    say(f"  db limit, 2 x {config.db_batch} calls: {batched.tps:.0f} calls/s")

        if phases.wanted("peer"):
            async with phases.phase("peer"):
                ready = workdir / "peer.ready"
                peer = bench.child(
                    "peer",
                    "bench.peer",
                    env=services.env(
                        BENCH_PEER_AMQP_URL=services.amqp_url,
                        BENCH_PEER_DATABASE_URL=url,
                        BENCH_PEER_PREFIX=services.amqp_prefix,
                        BENCH_PEER_READY_FILE=str(ready),
                        BENCH_PEER_PREFETCH=str(_WORKER_PREFETCH),
                    ),
                ).start()
                try:
                    await peer.wait_file(ready)
                    figure = await throughput_run(
                        bench,
                        "peer",
                        updates,
                        calls=config.peer_calls,
                        warmup=config.warmup,
                        timeout=run_timeout(config.peer_calls),
                        consumer=peer,
                    )
                    details["peer"] = {**figure.as_dict(), "rss_mb": round(peer.peak_rss_mb(), 1)}
                finally:
                    await peer.terminate()
                results["peer_tps"] = round(figure.tps, 1)
                say(f"  peer (FastStream): {figure.tps:.0f} calls/s")

        rss: list[float] = []
        rss_traced: list[float] = []  # tracing on loads the SDK and its exporter: apart

        def fresh_workers(
            label: str,
            run_calls: CallMaker,
            database_url: str | None = None,
            env: Mapping[str, str] | None = None,
            *,
            prepublished: bool = False,
            metered: bool = False,
        ) -> Contender:
            """A contender of `paired_rounds`: a fresh worker each round, its peak RSS kept.
            `prepublished`: started on a queue filled before it (a backlog); `metered`: its
            CPU per call kept in the figure."""

            async def run(number: int) -> RunFigure:
                figure, peak = await worker_run(
                    bench,
                    config,
                    run_calls,
                    f"worker-{label}-{number}",
                    prepublished=prepublished,
                    database_url=database_url,
                    env=env,
                    metered=metered,
                )
                (rss_traced if label.startswith("traced") else rss).append(peak)
                return figure

            return run

        def broker_loops(
            path: Path, run_calls: CallMaker, *, prepublished: bool = False, label: str = ""
        ) -> Contender:
            """A contender of `paired_rounds`: the broker-limit loop publishing the events of the
            sample at `path`, driven as the worker it takes turns with."""

            async def run(number: int) -> RunFigure:
                return await _broker_loop(
                    bench,
                    config,
                    path,
                    run_calls,
                    publish="aio-pika",
                    prepublished=prepublished,
                    label=label,
                )

            return run

        def fresh_latency(
            label: str, run_calls: CallMaker, env: Mapping[str, str] | None = None
        ) -> LatencyContender:
            """A contender of `latency_rounds`: a fresh worker each round, its peak RSS kept."""

            async def run(number: int) -> LatencyFigure:
                figure, peak = await worker_latency(
                    bench,
                    run_calls,
                    f"worker-{label}-{number}",
                    rate=config.latency_rate,
                    seconds=config.latency_seconds,
                    warmup=config.warmup,
                    env=env,
                )
                (rss_traced if label.startswith("traced") else rss).append(peak)
                return figure

            return run

        if phases.wanted("throughput"):
            async with phases.phase("throughput"):
                assert sample is not None, "no sample events"
                rounds = await paired_rounds(
                    config.rounds,
                    ("worker", fresh_workers("paired", updates)),
                    ("broker_limit", broker_loops(sample_path, updates)),
                    lambda run: f"({run['worker'].failures} not updated)",
                )
                details["throughput_rounds"] = rounds
                (
                    results["throughput"],
                    results["broker_limit_tps"],
                    results["ratio_vs_broker"],
                ) = paired_medians(rounds)

        if phases.wanted("broker_limit_aiormq"):
            async with phases.phase("broker_limit_aiormq"):
                assert sample is not None, "no sample events"
                figure = await _broker_loop(
                    bench, config, sample_path, updates, publish="aiormq", prepublished=False
                )
                details["broker_limit_aiormq"] = figure.as_dict()
                results["broker_limit_aiormq_tps"] = round(figure.tps, 1)
                say(f"  broker loop on aiormq: {figure.tps:.0f} calls/s")

        if phases.wanted("prepublished"):
            async with phases.phase("prepublished"):
                assert sample is not None, "no sample events"

                async def replays(number: int) -> RunFigure:
                    figure, peak = await worker_replay(
                        bench, updates, f"worker-replay-{number}", letters=config.replay_letters
                    )
                    rss.append(peak)
                    return figure

                # In rounds, as the steady throughput: one pair of runs on this machine ranged
                # from 0.67 to 0.86 within minutes. The replay of dead letters drains a backlog
                # too, so it is held to the same loop in the same rounds.
                drains: list[tuple[str, Contender]] = [
                    ("worker", fresh_workers("backlog", updates, prepublished=True))
                ]
                if config.replay_letters > 0:
                    drains.append(("replay", replays))
                rounds = await rounds_against(
                    config.rounds,
                    ("broker_limit", broker_loops(sample_path, updates, prepublished=True)),
                    drains,
                )
                details["backlog_rounds"] = rounds
                results["throughput_prepublished"] = median_rate(rounds, "worker")
                results["broker_limit_prepublished_tps"] = median_rate(rounds, "broker_limit")
                results["ratio_vs_broker_prepublished"] = median_ratio(rounds, "worker")
                if config.replay_letters > 0:
                    results["replay_tps"] = median_rate(rounds, "replay")
                    results["ratio_vs_broker_replay"] = median_ratio(rounds, "replay")

        if phases.wanted("latency"):
            async with phases.phase("latency"):
                assert sample is not None, "no sample events"

                async def floor_latency(number: int) -> LatencyFigure:
                    return await _latency_floor(bench, config, sample_path, updates)

                async def committed_floor_latency(number: int) -> LatencyFigure:
                    return await _latency_floor(
                        bench, config, sample_path, updates, database_url=url
                    )

                # In the same rounds: the floors, what the worker's tail is held against and
                # what committing each call before its answer leaves of it; and the create's
                # tail, which the update's is held to: two phases apart, the machine's drift
                # would decide that comparison.
                assert creations is not None
                rounds = await latency_rounds(
                    config.rounds,
                    (
                        ("worker", fresh_latency("latency", updates)),
                        ("floor", floor_latency),
                        ("committed_floor", committed_floor_latency),
                        ("create", fresh_latency("latency-create", creations)),
                    ),
                )
                details["latency_rounds"] = rounds
                results.update(median_percentiles(rounds, "worker"))
                results.update(median_percentiles(rounds, "floor", prefix="latency_floor_"))
                results.update(
                    median_percentiles(rounds, "committed_floor", prefix="latency_committed_floor_")
                )
                results.update(median_percentiles(rounds, "create", prefix="create_"))

        if phases.wanted("tracing"):
            async with phases.phase("tracing"), SpanSink() as default_sink, SpanSink() as sink:
                # The bench's calls carry no trace context (`bench.amqp.outgoing_call`), so a
                # parent-based sampler decides at the worker; `default` leaves the sampler to
                # the worker's own default (no `OTEL_TRACES_SAMPLER`: `BenchServices.env`).
                tracings: dict[str, dict[str, str]] = {
                    "off": {"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "none"},
                    "default": default_sink.env("ltm-worker"),
                    "on": {
                        **sink.env("ltm-worker"),
                        "OTEL_TRACES_SAMPLER": "parentbased_always_on",
                    },
                }

                def metered(name: str, label: str) -> Contender:
                    # Each worker's CPU per call too: what tracing costs the worker, which the
                    # rates, moved by the rest of the machine, may not resolve.
                    return fresh_workers(name, updates, env=tracings[label], metered=True)

                rounds = await rounds_against(
                    config.tracing_rounds,
                    ("off", metered("untraced", "off")),
                    [
                        ("default", metered("traced-default", "default")),
                        ("on", metered("traced-on", "on")),
                        # The untraced worker again: what the rounds move by with no change.
                        ("off_again", metered("untraced-again", "off")),
                    ],
                )
                details["tracing_rounds"] = rounds
                # The same four side by side, on one full queue: a paired figure that the
                # machine's drift between runs does not move (`bench.shared_queue`).
                side_by_side = [*tracings.items(), ("off_again", tracings["off"])]
                shared = await measure_shared_queue(
                    bench,
                    updates,
                    side_by_side,
                    SharedQueuePlan(
                        rounds=config.rounds,
                        calls=config.shared_calls,
                        warmup=config.warmup,
                        prefetch=_WORKER_PREFETCH,
                    ),
                )
                details["tracing_shared_rounds"] = shared
                results.update(
                    shared_queue_figures(
                        shared, [label for label, _ in side_by_side], "tracing_shared_"
                    )
                )
                for label in (*tracings, "off_again"):
                    results[f"tracing_{label}_tps"] = median_rate(rounds, label)
                    results[f"tracing_{label}_worker_cpu_ms"] = median_cpu(rounds, label, "worker")
                for label in ("default", "on", "off_again"):
                    results[f"tracing_{label}_vs_off"] = median_ratio(rounds, label)
                    results[f"tracing_{label}_worker_cpu_vs_off"] = median_cpu_ratio(
                        rounds, label, "off", "worker"
                    )
                latencies: dict[str, dict[str, Any]] = {}
                for label, env in tracings.items():
                    name = "latency-off" if label == "off" else f"traced-latency-{label}"
                    latency = await fresh_latency(name, updates, env)(1)
                    latencies[label] = latency.as_dict()
                    results[f"tracing_{label}_p50_ms"] = round(latency.p50_ms, 2)
                    results[f"tracing_{label}_p99_ms"] = round(latency.p99_ms, 2)
                    say(
                        f"  tracing {label} at {latency.offered_rate:.0f}/s: "
                        f"p50 {latency.p50_ms:.1f} ms, p99 {latency.p99_ms:.1f} ms"
                    )
                details["tracing_latency"] = latencies
                details["span_sink"] = {
                    label: {"requests": used.requests, "bytes": used.bytes}
                    for label, used in (("default", default_sink), ("on", sink))
                }
                if sink.requests == 0:
                    raise RuntimeError("the workers with every call sampled exported no span")

        if phases.wanted("seen"):
            async with phases.phase("seen"):
                seen_updates = SeenUpdates(url, targets, entries=_SEEN_ENTRIES)
                rounds = await paired_rounds(
                    config.rounds,
                    ("seen_25", fresh_workers("seen", seen_updates)),
                    ("none", fresh_workers("unseen", updates)),
                    lambda run: f"({run['seen_25'].failures} of seen_25 not updated)",
                )
                details["seen_rounds"] = rounds
                results["seen_25_tps"] = round(median(r["seen_25"]["tps"] for r in rounds), 1)
                results["none_tps"] = round(median(r["none"]["tps"] for r in rounds), 1)
                results["seen_25_vs_none_throughput"] = round(median(r["ratio"] for r in rounds), 3)
                seen_latencies: dict[str, dict[str, Any]] = {}
                for label, makes in (("seen_25", seen_updates), ("none", updates)):
                    latency = await fresh_latency(f"latency-{label}", makes)(1)
                    seen_latencies[label] = latency.as_dict()
                    results[f"{label}_p50_ms"] = round(latency.p50_ms, 2)
                    results[f"{label}_p99_ms"] = round(latency.p99_ms, 2)
                    say(
                        f"  {label} at {latency.offered_rate:.0f}/s: "
                        f"p50 {latency.p50_ms:.1f} ms, p99 {latency.p99_ms:.1f} ms"
                        f" ({latency.failures} not updated)"
                    )
                details["seen_latency"] = seen_latencies

        if phases.wanted("create_throughput"):
            async with phases.phase("create_throughput"):
                assert creations is not None
                sampler = await start_worker(bench, "worker-sample-create")
                try:
                    create_sample = await capture(
                        connection,
                        services.topology,
                        url,
                        creations,
                        expected=MemoryStatus.SAVED,
                        tool_call_id="sample-create:0",
                    )
                finally:
                    await sampler.terminate()
                create_sample_path = workdir / "sample-create.json"
                create_sample_path.write_bytes(create_sample.to_json())
                details["create_event_sizes"] = create_sample.sizes()
                rounds = await paired_rounds(
                    config.rounds,
                    ("worker", fresh_workers("create", creations)),
                    (
                        "broker_limit",
                        broker_loops(create_sample_path, creations, label="-create"),
                    ),
                    lambda run: f"({run['worker'].failures} not saved)",
                )
                details["create_throughput_rounds"] = rounds
                (
                    results["create_throughput"],
                    results["create_broker_limit_tps"],
                    results["create_ratio_vs_broker"],
                ) = paired_medians(rounds)

        if config.big_memories > 0 and phases.wanted("cost_1m_vs_10k"):
            async with phases.phase("cost_1m_vs_10k"):
                # A second database holds the large table, so that the two sizes can take
                # turns, as the broker loop and the worker do: the machine drifts meanwhile.
                big_url = with_database_name(url, f"ltm_bench_{services.run_id}_big")
                try:
                    await asyncio.to_thread(migrate, big_url)
                    await seed_servers(big_url, config.servers)
                    grown = await grow_memories(big_url, config.big_memories)
                    stored = await memory_count(big_url)
                    say(f"  grew a second database to {stored} memories in {grown:.1f}s")
                    big_targets = await pick_targets(big_url, config.calls, seed=2)
                    # Calls per second with 10k over those with 1M: time per call, 1M over 10k.
                    cost_rounds = await paired_rounds(
                        config.rounds,
                        ("small", fresh_workers("small", updates, url)),
                        ("big", fresh_workers("big", updates_of(big_targets), big_url)),
                    )
                finally:
                    await asyncio.to_thread(drop_database, big_url)
                details["cost"] = {
                    "small_memories": config.memories,
                    "big_memories": stored,
                    "grow_seconds": round(grown, 1),
                    "rounds": cost_rounds,
                }
                results["cost_1m_vs_10k"] = round(median(r["ratio"] for r in cost_rounds), 3)

        if phases.wanted("scaling"):
            async with phases.phase("scaling"):
                figures, scaling, peaks = await measure_scaling(
                    bench,
                    updates,
                    ScalingPlan(
                        config.scaling_workers,
                        config.rounds,
                        config.calls,
                        config.warmup,
                        fixed_rate=config.scaling_rate,
                        fixed_seconds=config.scaling_rate_seconds,
                    ),
                )
                details["scaling_rounds"] = scaling["rounds"]
                details["idle_worker"] = scaling["idle_worker"]
                results.update(figures)
                rss += peaks

        if phases.wanted("cluster"):
            async with phases.phase("cluster"):
                figures, details["cluster"], peaks = await measure_cluster(
                    bench,
                    updates,
                    ClusterPlan(
                        config.rounds,
                        config.calls,
                        config.warmup,
                        config.latency_rate,
                        config.latency_seconds,
                        target_rate=config.cluster_rate,
                    ),
                )
                results.update(figures)
                rss += peaks

        if phases.wanted("erasure"):
            async with phases.phase("erasure"):
                subject = await erasure.seed_subject(url)
                eraser = await start_worker(bench, "worker-erasure")
                try:
                    seconds, answer = await erasure.timed_erasure(
                        connection, services.topology, subject
                    )
                finally:
                    await eraser.terminate()
                receipt = answer.receipt
                if receipt is None or receipt.revisions_redacted != erasure.REVISIONS:
                    raise RuntimeError(f"the erasure did not redact every revision: {receipt}")
                details["erasure_receipt"] = receipt.model_dump()
                results[erasure.ERASURE_KEY] = round(seconds, 3)
                say(
                    f"  erasure of {erasure.MEMORIES} memories, {erasure.REVISIONS} revisions: "
                    f"{seconds:.2f} s"
                )

        if phases.wanted("rss"):
            async with phases.phase("rss"):
                if not rss:
                    raise RuntimeError("no worker process was measured")
                results["rss_mb"] = round(max(rss), 1)
                details["rss_mb_per_worker"] = [round(value, 1) for value in rss]
                if rss_traced:
                    results["tracing_on_rss_mb"] = round(max(rss_traced), 1)
    finally:
        if bench is not None:
            for child in bench.children:
                child.kill()
        await connection.close()

    # Each ratio divides figures measured the same way (calls published during the run); the
    # ratios of rounds are their medians, set by their phases.
    for key, numerator, denominator in (
        ("ratio_vs_broker_aiormq", "throughput", "broker_limit_aiormq_tps"),
        ("ratio_vs_peer", "throughput", "peer_tps"),
    ):
        if results.get(numerator) and results.get(denominator):
            results[key] = round(results[numerator] / results[denominator], 3)
    results["details"] = details
    results["phase_seconds"] = phases.seconds
    results["errors"] = phases.errors
    results["duration_s"] = round(time.perf_counter() - started, 1)
    machine = results.setdefault("machine", {})
    machine["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    machine["description"] = machine_line(machine)
    results["targets"] = evaluate(results)
    results["summary"] = summary_rows(results)
    results["logs"] = str(workdir)
    return results


def _fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        digits = 0 if abs(value) >= 100 else (1 if abs(value) >= 10 else 2)
        text = f"{value:,.{digits}f}"
    else:
        text = str(value)
    return f"{text}{unit}"


def render_table(results: dict[str, Any]) -> str:
    """The raw figures of a run, one row each (its key, with what it is, and its value), under
    a line of the machine; then the failed phases and where the logs are. The targets and
    whether each was met are the summary's (`bench.summary`), printed after this table."""
    machine = results.get("machine", {})

    def value(key: str, unit: str = "") -> str:
        return _fmt(results.get(key), unit)

    def side_by_side(keys: Sequence[str], unit: str) -> str:
        return " | ".join(_fmt(results.get(key)) for key in keys) + unit

    rows: list[tuple[str, str]] = [
        ("db_limit_tps (1 client)", value("db_limit_tps", " /s")),
        ("db_limit_tps_4 (4 clients)", value("db_limit_tps_4", " /s")),
        ("db_limit_tps_16 (16 clients)", value("db_limit_tps_16", " /s")),
        ("db_limit_batched_tps (2 x batch)", value("db_limit_batched_tps", " /s")),
        ("broker_limit_tps (aio-pika loop)", value("broker_limit_tps", " /s")),
        ("broker_limit_aiormq_tps (aiormq loop)", value("broker_limit_aiormq_tps", " /s")),
        (
            "broker_limit_prepublished_tps (full queue)",
            value("broker_limit_prepublished_tps", " /s"),
        ),
        ("peer_tps (FastStream)", value("peer_tps", " /s")),
        ("throughput (worker)", value("throughput", " /s")),
        ("throughput_prepublished", value("throughput_prepublished", " /s")),
        ("ratio_vs_broker", value("ratio_vs_broker")),
        ("ratio_vs_broker_aiormq", value("ratio_vs_broker_aiormq")),
        ("ratio_vs_broker_prepublished", value("ratio_vs_broker_prepublished")),
        ("replay_tps (dead letters replayed)", value("replay_tps", " /s")),
        ("ratio_vs_broker_replay", value("ratio_vs_broker_replay")),
        ("ratio_vs_peer", value("ratio_vs_peer")),
        ("p50_ms", value("p50_ms", " ms")),
        ("p95_ms", value("p95_ms", " ms")),
        ("p99_ms", value("p99_ms", " ms")),
        (
            "latency_floor p50 | p99 (broker loop, same rate)",
            side_by_side(("latency_floor_p50_ms", "latency_floor_p99_ms"), " ms"),
        ),
        (
            "latency_committed_floor p50 | p99 (loop committing each call)",
            side_by_side(
                ("latency_committed_floor_p50_ms", "latency_committed_floor_p99_ms"), " ms"
            ),
        ),
        # Tracing off and on side by side, measured alike and in turns.
        (
            "tracing off | default | on: throughput",
            side_by_side(("tracing_off_tps", "tracing_default_tps", "tracing_on_tps"), " /s"),
        ),
        ("tracing_default_vs_off (throughput)", value("tracing_default_vs_off")),
        ("tracing_on_vs_off (every call sampled)", value("tracing_on_vs_off")),
        ("tracing_off_again_vs_off (the same untraced worker)", value("tracing_off_again_vs_off")),
        (
            "tracing off | default | on: worker CPU per call",
            side_by_side(
                (
                    "tracing_off_worker_cpu_ms",
                    "tracing_default_worker_cpu_ms",
                    "tracing_on_worker_cpu_ms",
                ),
                " ms",
            ),
        ),
        ("tracing_default_worker_cpu_vs_off", value("tracing_default_worker_cpu_vs_off")),
        ("tracing_on_worker_cpu_vs_off", value("tracing_on_worker_cpu_vs_off")),
        ("seen 25 | none: throughput", side_by_side(("seen_25_tps", "none_tps"), " /s")),
        ("seen_25_vs_none_throughput", value("seen_25_vs_none_throughput")),
        ("seen 25 | none: p50", side_by_side(("seen_25_p50_ms", "none_p50_ms"), " ms")),
        ("seen 25 | none: p99", side_by_side(("seen_25_p99_ms", "none_p99_ms"), " ms")),
        (
            "tracing off | default | on: p50",
            side_by_side(
                ("tracing_off_p50_ms", "tracing_default_p50_ms", "tracing_on_p50_ms"), " ms"
            ),
        ),
        (
            "tracing off | default | on: p99",
            side_by_side(
                ("tracing_off_p99_ms", "tracing_default_p99_ms", "tracing_on_p99_ms"), " ms"
            ),
        ),
        (
            "create_broker_limit_tps (loop, a creation's events)",
            value("create_broker_limit_tps", " /s"),
        ),
        ("create_throughput (worker)", value("create_throughput", " /s")),
        ("create_ratio_vs_broker", value("create_ratio_vs_broker")),
        ("create_p50_ms", value("create_p50_ms", " ms")),
        ("create_p95_ms", value("create_p95_ms", " ms")),
        ("create_p99_ms", value("create_p99_ms", " ms")),
        *scaling_rows(results),
        *cluster_rows(results),
        (f"{erasure.ERASURE_KEY} (one user)", value(erasure.ERASURE_KEY, " s")),
        ("rss_mb", value("rss_mb", " MB")),
        ("tracing_on_rss_mb", value("tracing_on_rss_mb", " MB")),
        ("cost_1m_vs_10k", value("cost_1m_vs_10k", " x")),
    ]
    header = ("figure", "measured")
    width = max(len(label) for label, _ in (*rows, header))
    lines = [
        f"LTM bench, {machine_line(machine)}",
        "",
        f"{header[0].ljust(width)}  {header[1]}",
        f"{'-' * width}  {'-' * max(len(shown) for _, shown in (*rows, header))}",
    ]
    lines += [f"{label.ljust(width)}  {shown}".rstrip() for label, shown in rows]
    load = machine.get("load_average_at_start") or [0.0]
    if load[0] > 1.0:
        lines.append(
            f"note: the machine was already busy at start (load average {load}): other work "
            f"shares these {machine.get('nproc', '?')} cores, so the figures are lower than on "
            "a quiet machine"
        )
    errors = results.get("errors") or {}
    for name, error in errors.items():
        lines.append(f"phase {name} failed: {error.splitlines()[0] if error else ''}")
    lines.append(f"took {results.get('duration_s', '?')} s; logs in {results.get('logs', '?')}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    import uvloop

    wall = time.perf_counter()
    with bench_services() as services:
        results = uvloop.run(run_bench(config, services))
    results["wall_s"] = round(time.perf_counter() - wall, 1)
    for calls_file in Path(results["logs"]).glob("*.jsonl"):  # publishers' input; logs stay
        calls_file.unlink()
    config.output.write_bytes(
        orjson.dumps(results, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS) + b"\n"
    )
    print()
    print(render_table(results))
    print()
    print("Summary (every target of the bench):")
    print(text_table(results["summary"]))
    print(f"results written to {config.output}")
    return 1 if results.get("errors") else 0


if __name__ == "__main__":
    sys.exit(main())
