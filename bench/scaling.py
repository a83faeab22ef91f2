"""The `scaling` phase: throughput with 1, 2 and 4 workers on one broker (the machine's), and
where the machine's CPU goes per call for each count.

Each round runs every worker count once, the order turning round each round
(`bench.rounds.turn_order`); a run starts its workers fresh, waits until every one is ready,
warms them up, and counts N calls published meanwhile by a separate process, as the
throughput phase does. Its sustained part is metered (`bench.cpu`): the workers' CPU, the
broker's (the Erlang VM), the database's (the postmaster and every backend), the bench's own
(this process and the publisher), the rest of the machine (`other`), and the machine's busy
total, each per call answered. Each figure is the median of its rounds (so the parts of a
split need not add up exactly to its total).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import median
from typing import Any, Final

from bench.cpu import CpuMeter
from bench.rounds import say, turn_order
from bench.service_pids import broker_pid, postmaster_pid
from bench.system import Bench, RunFigure, throughput_run
from bench.workers import run_timeout, start_worker
from bench.world import CallMaker

__all__ = ["CPU_PARTS", "ScalingPlan", "measure_scaling", "scaling_figures", "scaling_rows"]

# The groups metered, then what they leave of the machine's busy time, then that total.
CPU_PARTS: Final = ("worker", "broker", "database", "bench", "other", "total")


@dataclass(frozen=True, slots=True)
class ScalingPlan:
    counts: tuple[int, ...]  # worker counts compared, e.g. (1, 2, 4)
    rounds: int
    calls: int
    warmup: int


@dataclass(frozen=True, slots=True)
class _Services:
    """The pids of the machine's broker and database server, found once."""

    broker: int
    database: int


async def _run_with(
    bench: Bench, calls: CallMaker, plan: ScalingPlan, count: int, services: _Services
) -> tuple[RunFigure, list[float]]:
    """`count` fresh workers answering `plan.calls` calls, metered; and their peak RSS."""
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
        return figure, [worker.peak_rss_mb() for worker in workers]
    finally:
        for worker in workers:
            await worker.terminate()


async def measure_scaling(
    bench: Bench, calls: CallMaker, plan: ScalingPlan
) -> tuple[dict[str, Any], list[dict[str, Any]], list[float]]:
    """The phase's results, its rounds (every run's figure and split), and the workers'
    peak RSS."""
    services = _Services(
        broker=broker_pid(bench.services.amqp_url),
        database=await postmaster_pid(bench.services.database_url),
    )
    rounds: list[dict[str, Any]] = []
    peaks: list[float] = []
    for number in range(1, plan.rounds + 1):
        kept: dict[str, Any] = {}
        for count in turn_order(plan.counts, number):
            figure, rss = await _run_with(bench, calls, plan, count, services)
            peaks += rss
            kept[str(count)] = figure.as_dict()
            assert figure.cpu is not None
            split = figure.cpu.ms_per_call
            say(
                f"  round {number}, {count} worker(s): {figure.tps:.0f} calls/s; CPU ms/call "
                + ", ".join(f"{part} {split[part]:.2f}" for part in CPU_PARTS)
                + f"; machine {figure.cpu.busy_share:.0%} busy"
            )
        rounds.append(kept)
    return scaling_figures(rounds), rounds, peaks


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


def scaling_rows(results: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    """The printed table's rows: the rates side by side, then one CPU split a worker count."""
    rates: Mapping[str, float] = results.get("scaling_tps") or {}
    if not rates:
        return [("scaling (1 | 2 | 4 workers)", "-", "", "")]
    counts = " | ".join(rates)
    rows = [
        (
            f"scaling: {counts} workers",
            " | ".join(f"{rate:,.0f}" for rate in rates.values()) + " /s",
            "",
            "",
        )
    ]
    versus: Mapping[str, float] = results.get("scaling_vs_1") or {}
    if versus:
        rows.append(
            (
                f"scaling_vs_1: {' | '.join(versus)} workers",
                " | ".join(f"{ratio:.2f}" for ratio in versus.values()),
                "",
                "",
            )
        )
    busy: Mapping[str, float] = results.get("scaling_busy_share") or {}
    for key, split in (results.get("cpu_ms_per_call") or {}).items():
        parts = ", ".join(f"{part} {split[part]:.2f}" for part in CPU_PARTS[:-1])
        rows.append(
            (
                f"CPU ms/call, {key} worker(s): total ({busy.get(key, 0.0):.0%} of the cores)",
                f"{split['total']:.2f} ({parts})",
                "",
                "",
            )
        )
    return rows
