"""The `scaling` phase: throughput with 1, 2 and 4 workers on one broker (the machine's), and
where the machine's CPU goes per call for each count, at saturation and at a fixed rate below
it; and what one idle worker costs.

Each round runs every worker count once, the order turning round each round
(`bench.rounds.turn_order`); a run starts its workers fresh, waits until every one is ready,
warms them up, and counts N calls published meanwhile by a separate process, as the
throughput phase does. Its sustained part is metered (`bench.cpu`): the workers' CPU, the
broker's (the Erlang VM), the database's (the postmaster and every backend), the bench's own
(this process and the publisher), the rest of the machine (`other`), and the machine's busy
total, each per call answered. Each figure is the median of its rounds (so the parts of a
split need not add up exactly to its total).

Then the same workers answer calls published at a fixed rate below saturation (150 calls/s,
`--scaling-rate`), metered from the first publish to the last result: at saturation more
workers mean more calls in flight and smaller batches, so the CPU per call there mixes what
a worker costs the shared broker and database with how busy the machine is; at a fixed rate
each count answers the same calls at the same pace. `scaling_fixed_rate_cost_vs_1`: each
count's broker plus database CPU per call over one worker's, within the round, the median.

Before the rounds, one worker is started, waits until ready, and answers nothing for ~10 s:
`idle_worker_core_share`, the share of one core it uses meanwhile (its polls, timers and
heartbeats), from its /proc ticks.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import median
from typing import Any, Final

from bench.cpu import CpuMeter, core_share, group_ticks, read_sample
from bench.rounds import say, turn_order
from bench.service_pids import broker_pid, postmaster_pid
from bench.system import Bench, LatencyFigure, RunFigure, latency_run, throughput_run
from bench.workers import run_timeout, start_worker
from bench.world import CallMaker

__all__ = [
    "CPU_PARTS",
    "SHARED_PARTS",
    "ScalingPlan",
    "fixed_rate_figures",
    "measure_scaling",
    "scaling_figures",
    "scaling_rows",
]

# The groups metered, then what they leave of the machine's busy time, then that total.
CPU_PARTS: Final = ("worker", "broker", "database", "bench", "other", "total")
# What every worker shares, whose cost per call must not grow with the workers: on separate
# machines these are the parts that would saturate first.
SHARED_PARTS: Final = ("broker", "database")
# An idle worker's first moments after ready still finish its start (connections, imports).
_IDLE_SETTLE_S: Final = 2.0


@dataclass(frozen=True, slots=True)
class ScalingPlan:
    counts: tuple[int, ...]  # worker counts compared, e.g. (1, 2, 4)
    rounds: int
    calls: int
    warmup: int
    fixed_rate: float = 150.0  # calls/s of the fixed-rate runs, below saturation; 0 skips them
    fixed_seconds: float = 15.0
    idle_seconds: float = 10.0  # how long the idle worker is metered; 0 skips it


@dataclass(frozen=True, slots=True)
class _Services:
    """The pids of the machine's broker and database server, found once."""

    broker: int
    database: int


async def _run_with(
    bench: Bench, calls: CallMaker, plan: ScalingPlan, count: int, services: _Services
) -> tuple[RunFigure, LatencyFigure | None, list[float]]:
    """`count` fresh workers answering `plan.calls` calls, metered; then calls at the plan's
    fixed rate, metered (None when the plan has none); and the workers' peak RSS."""
    workers = []
    try:
        for index in range(count):
            workers.append(await start_worker(bench, f"worker-scaling{count}-{index + 1}"))
        meter = CpuMeter(
            {
                "worker": [worker.pid for worker in workers],
                "broker": [services.broker],
                "database": [services.database],
                "bench": [os.getpid()],
            }
        )
        figure = await throughput_run(
            bench,
            f"scaling{count}w",
            calls,
            calls=plan.calls,
            warmup=plan.warmup,
            timeout=run_timeout(plan.calls),
            consumer=workers[0],
            meter=meter,
        )
        for worker in workers:
            worker.check_alive()  # the others are not watched during the run
        if figure.cpu is None:
            raise RuntimeError(f"{count} worker(s): the run ended before it could be metered")
        fixed: LatencyFigure | None = None
        if plan.fixed_rate > 0:
            # The same workers, warm from the saturated run.
            fixed = await latency_run(
                bench,
                calls,
                rate=plan.fixed_rate,
                seconds=plan.fixed_seconds,
                warmup=0,
                timeout=run_timeout(round(plan.fixed_rate * plan.fixed_seconds)),
                meter=meter,
            )
            for worker in workers:
                worker.check_alive()
        return figure, fixed, [worker.peak_rss_mb() for worker in workers]
    finally:
        for worker in workers:
            await worker.terminate()


async def _idle_share(bench: Bench, seconds: float) -> dict[str, Any]:
    """One worker started, ready and given no call: the share of a core it uses."""
    worker = await start_worker(bench, "worker-idle")
    try:
        await asyncio.sleep(_IDLE_SETTLE_S)
        before, started = group_ticks(read_sample().processes, [worker.pid]), time.monotonic()
        await asyncio.sleep(seconds)
        after, ended = group_ticks(read_sample().processes, [worker.pid]), time.monotonic()
        worker.check_alive()
    finally:
        await worker.terminate()
    return {
        "ticks": after - before,
        "seconds": round(ended - started, 2),
        "core_share": round(core_share(after - before, ended - started), 4),
    }


async def measure_scaling(
    bench: Bench, calls: CallMaker, plan: ScalingPlan
) -> tuple[dict[str, Any], dict[str, Any], list[float]]:
    """The phase's results, its details (the idle worker's ticks; the rounds: every run's
    figure and split, its fixed-rate run's under `fixed_rate`), and the workers' peak RSS."""
    services = _Services(
        broker=broker_pid(bench.services.amqp_url),
        database=await postmaster_pid(bench.services.database_url),
    )
    figures: dict[str, Any] = {}
    idle: dict[str, Any] | None = None
    if plan.idle_seconds > 0:
        idle = await _idle_share(bench, plan.idle_seconds)
        figures["idle_worker_core_share"] = idle["core_share"]
        say(f"  one idle worker: {idle['core_share']:.2%} of a core over {idle['seconds']} s")
    rounds: list[dict[str, Any]] = []
    peaks: list[float] = []
    for number in range(1, plan.rounds + 1):
        kept: dict[str, Any] = {}
        for count in turn_order(plan.counts, number):
            figure, fixed, rss = await _run_with(bench, calls, plan, count, services)
            peaks += rss
            kept[str(count)] = figure.as_dict()
            assert figure.cpu is not None
            say(
                f"  round {number}, {count} worker(s): {figure.tps:.0f} calls/s; "
                + _split_text(figure.cpu.ms_per_call)
                + f"; machine {figure.cpu.busy_share:.0%} busy"
            )
            if fixed is not None:
                assert fixed.cpu is not None
                kept[str(count)]["fixed_rate"] = fixed.as_dict()
                say(
                    f"  round {number}, {count} worker(s) at {fixed.offered_rate:.0f}/s: "
                    + _split_text(fixed.cpu.ms_per_call)
                    + f"; p99 {fixed.p99_ms:.1f} ms"
                )
        rounds.append(kept)
    figures.update(scaling_figures(rounds))
    if plan.fixed_rate > 0:
        figures["scaling_fixed_rate_per_s"] = plan.fixed_rate
        figures.update(fixed_rate_figures(rounds))
    return figures, {"idle_worker": idle, "rounds": rounds}, peaks


def _split_text(split: Mapping[str, float]) -> str:
    return "CPU ms/call " + ", ".join(f"{part} {split[part]:.2f}" for part in CPU_PARTS)


def scaling_figures(rounds: Sequence[Mapping[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """From the rounds' figures (worker count → `RunFigure.as_dict()`), the medians:
    `scaling_tps`, `scaling_vs_1` (each round's rate over its 1-worker rate),
    `cpu_ms_per_call` and `scaling_busy_share`, each keyed by the worker count."""
    counts = sorted({int(count) for kept in rounds for count in kept})
    keys = [str(count) for count in counts]

    def over_rounds(key: str, pick: Any) -> float:
        return float(median(pick(kept[key]) for kept in rounds))

    figures: dict[str, Any] = {
        "scaling_tps": {key: round(over_rounds(key, lambda run: run["tps"]), 1) for key in keys},
        "cpu_ms_per_call": {
            key: {
                part: round(
                    over_rounds(key, lambda run, part=part: run["cpu"]["cpu_ms_per_call"][part]),
                    3,
                )
                for part in CPU_PARTS
            }
            for key in keys
        },
        "scaling_busy_share": {
            key: round(over_rounds(key, lambda run: run["cpu"]["busy_share"]), 3) for key in keys
        },
    }
    if "1" in keys:
        figures["scaling_vs_1"] = {
            key: round(float(median(kept[key]["tps"] / kept["1"]["tps"] for kept in rounds)), 3)
            for key in keys
            if key != "1"
        }
    return figures


def fixed_rate_figures(rounds: Sequence[Mapping[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """From the rounds' fixed-rate runs (worker count → a run's figure whose `fixed_rate`
    holds `LatencyFigure.as_dict()` with its CPU split), the medians, keyed by worker count:
    `scaling_fixed_rate_cpu_ms_per_call` (each part's, and `shared`: the broker's plus the
    database's), `scaling_fixed_rate_p99_ms`, and `scaling_fixed_rate_cost_vs_1`: within each
    round, a count's shared CPU per call over one worker's, then the median over the rounds."""
    counts = sorted({int(count) for kept in rounds for count in kept})
    keys = [
        str(count) for count in counts if all("fixed_rate" in kept[str(count)] for kept in rounds)
    ]

    def split(run: Mapping[str, Any]) -> Mapping[str, float]:
        parts: Mapping[str, float] = run["fixed_rate"]["cpu"]["cpu_ms_per_call"]
        return parts

    def shared(run: Mapping[str, Any]) -> float:
        return sum(split(run)[part] for part in SHARED_PARTS)

    figures: dict[str, Any] = {
        "scaling_fixed_rate_cpu_ms_per_call": {
            key: {
                **{
                    part: round(float(median(split(kept[key])[part] for kept in rounds)), 3)
                    for part in CPU_PARTS
                },
                "shared": round(float(median(shared(kept[key]) for kept in rounds)), 3),
            }
            for key in keys
        },
        "scaling_fixed_rate_p99_ms": {
            key: round(float(median(kept[key]["fixed_rate"]["p99_ms"] for kept in rounds)), 2)
            for key in keys
        },
    }
    if "1" in keys and all(shared(kept["1"]) > 0 for kept in rounds):
        figures["scaling_fixed_rate_cost_vs_1"] = {
            key: round(float(median(shared(kept[key]) / shared(kept["1"]) for kept in rounds)), 3)
            for key in keys
        }
    return figures


def scaling_rows(results: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The raw table's rows (figure, measured): the rates side by side, then one CPU split a
    worker count. The targets are the summary's (`bench.summary`)."""
    rates: Mapping[str, float] = results.get("scaling_tps") or {}
    if not rates:
        return [("scaling (1 | 2 | 4 workers)", "-")]
    counts = " | ".join(rates)
    rows = [
        (
            f"scaling: {counts} workers",
            " | ".join(f"{rate:,.0f}" for rate in rates.values()) + " /s",
        )
    ]
    versus: Mapping[str, float] = results.get("scaling_vs_1") or {}
    if versus:
        rows.append(
            (
                f"scaling_vs_1: {' | '.join(versus)} workers",
                " | ".join(f"{ratio:.2f}" for ratio in versus.values()),
            )
        )
    busy: Mapping[str, float] = results.get("scaling_busy_share") or {}
    for key, split in (results.get("cpu_ms_per_call") or {}).items():
        parts = ", ".join(f"{part} {split[part]:.2f}" for part in CPU_PARTS[:-1])
        rows.append(
            (
                f"CPU ms/call, {key} worker(s): total ({busy.get(key, 0.0):.0%} of the cores)",
                f"{split['total']:.2f} ({parts})",
            )
        )
    rate = results.get("scaling_fixed_rate_per_s")
    costs: Mapping[str, float] = results.get("scaling_fixed_rate_cost_vs_1") or {}
    for key, split in (results.get("scaling_fixed_rate_cpu_ms_per_call") or {}).items():
        parts = ", ".join(f"{part} {split[part]:.2f}" for part in CPU_PARTS[:-1])
        cost = costs.get(key)
        rows.append(
            (
                f"CPU ms/call at {rate:g}/s, {key} worker(s): total",
                f"{split['total']:.2f} ({parts})"
                + ("" if cost is None else f"; broker + database {cost:.2f} x one worker's"),
            )
        )
    idle = results.get("idle_worker_core_share")
    if idle is not None:
        rows.append(("idle_worker_core_share (one worker, no calls)", f"{idle:.2%}"))
    return rows
