"""Workers sharing one queue, filled before they start: how many calls each answers in the same
seconds, and with how much CPU (the tracing phase's side-by-side figures).

Runs taken in turns compare a worker with another measured a minute before or after, and on a
busy machine single rounds of the same worker move by up to 30 %: more than a 5 % difference.
Here the workers compared consume one queue at the same time, so that a slower minute of the
machine is slower for all of them. RabbitMQ gives each consumer a new call for each it
acknowledges (every worker has the same prefetch), so while the queue stays full each worker's
share of the calls answered is its share of the throughput. Yet the shares of two workers
with the same settings still differed by up to 15 % in a round of a minute, and their CPU per
call by up to 5 %: the CPU per call is what resolves a few percent.

A round: the queue is filled with `calls` calls before any worker starts (`fill_queue`); every
worker is started (in an order that turns round each round) and made ready; the window opens
once each has answered `warmup` calls, and closes while the queue still holds at least the
workers' prefetch together, so that none ever waited for calls. Each worker's count is its own
`ltm_tool_calls_total`, read from its metrics port at both ends of the window, and its CPU per
call comes from its /proc ticks over the same window. Two workers with the same settings (the
baseline and its `_again`) say how far the method moves on its own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import median
from typing import Any, Final

import aiohttp

from bench.cpu import TICKS_PER_SECOND, CpuSample, group_ticks, read_sample
from bench.processes import Child
from bench.rounds import say, turn_order
from bench.system import Bench, fill_queue
from bench.workers import run_timeout, worker_child
from bench.world import CallMaker, reset_calls
from harness.processes import calls_answered

__all__ = [
    "Reading",
    "SharedQueuePlan",
    "measure_shared_queue",
    "shared_queue_figures",
    "window_of",
]

# How often the workers' counts are read while the window waits to open.
_POLL_S: Final = 0.2


@dataclass(frozen=True, slots=True)
class SharedQueuePlan:
    rounds: int
    calls: int  # in the queue before the workers start
    warmup: int  # calls each worker answers before the window opens
    prefetch: int  # each worker's


@dataclass(frozen=True, slots=True)
class Reading:
    """Every worker's calls answered so far and the machine's ticks, at one moment."""

    at: float
    answered: dict[str, int]
    cpu: CpuSample


async def _answered(session: aiohttp.ClientSession, ports: Mapping[str, int]) -> dict[str, int]:
    """Each worker's calls answered so far, read from its metrics port (all at once)."""

    async def answered(port: int) -> int:
        async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
            response.raise_for_status()
            return calls_answered(await response.text())

    counts = await asyncio.gather(*(answered(port) for port in ports.values()))
    return dict(zip(ports, counts, strict=True))


def _reading(answered: dict[str, int]) -> Reading:
    return Reading(time.perf_counter(), answered, read_sample())


def window_of(
    first: Reading, last: Reading, pids: Mapping[str, int], baseline: str
) -> dict[str, Any]:
    """Each worker's calls, calls/s and CPU ms per call between the two readings, and each
    other worker's calls/s and CPU per call over the baseline's."""
    seconds = last.at - first.at
    calls: dict[str, int] = {}
    cpu_ms: dict[str, float] = {}
    for label, pid in pids.items():
        calls[label] = last.answered[label] - first.answered[label]
        if calls[label] <= 0:
            raise RuntimeError(f"the {label} worker answered nothing in the window")
        ticks = group_ticks(last.cpu.processes, [pid]) - group_ticks(first.cpu.processes, [pid])
        cpu_ms[label] = ticks * 1000 / TICKS_PER_SECOND / calls[label]
    others = [label for label in pids if label != baseline]
    return {
        **{
            label: {
                "calls": calls[label],
                "tps": round(calls[label] / seconds, 1),
                "cpu_ms_per_call": round(cpu_ms[label], 3),
            }
            for label in pids
        },
        "seconds": round(seconds, 2),
        # Over the same seconds, the rates' ratio is the counts'.
        "ratio": {label: round(calls[label] / calls[baseline], 3) for label in others},
        "cpu_ratio": {label: round(cpu_ms[label] / cpu_ms[baseline], 3) for label in others},
    }


async def _until(
    session: aiohttp.ClientSession,
    ports: Mapping[str, int],
    children: Sequence[Child],
    opened: int,
    deadline: float,
) -> Reading:
    """The first reading in which every worker has answered `opened` calls (the machine's
    ticks read then only)."""
    while True:
        for child in children:
            child.check_alive()
        answered = await _answered(session, ports)
        if min(answered.values()) >= opened:
            return _reading(answered)
        if time.monotonic() > deadline:
            raise RuntimeError(f"the window did not open: answered so far {answered}")
        await asyncio.sleep(_POLL_S)


async def _round(
    bench: Bench,
    make_calls: CallMaker,
    workers: Sequence[tuple[str, Mapping[str, str]]],
    plan: SharedQueuePlan,
    number: int,
) -> dict[str, Any]:
    await reset_calls(bench.services.database_url)
    run = bench.run_name("shared")
    tally = bench.counter.expect(run, plan.calls)
    timeout = run_timeout(plan.calls)
    deadline = time.monotonic() + timeout
    await fill_queue(bench, run, make_calls, plan.calls, timeout)
    started = {
        label: worker_child(bench, f"worker-shared-{label}-{number}", env=env)
        for label, env in turn_order(workers, number)
    }
    children = [child for child, _ in started.values()]
    ports = {label: port for label, (_, port) in started.items()}
    # Closing while the queue holds at least every worker's prefetch: each worker has received
    # at most its count plus its prefetch, and the tally trails the counts.
    closing = plan.calls - 2 * plan.prefetch * len(workers)
    try:
        for child in children:
            child.start()
        for child, port in started.values():
            await child.wait_http_ok(f"http://127.0.0.1:{port}/readyz")
        async with aiohttp.ClientSession() as session:
            first = await _until(session, ports, children, plan.warmup, deadline)
            while tally.count < closing:
                for child in children:
                    child.check_alive()
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{run}: {tally.count} of {closing} results in {timeout}s")
                await asyncio.sleep(0.05)
            last = _reading(await _answered(session, ports))
    finally:
        for child in children:
            await child.terminate()
        await bench.purge(bench.services.topology.worker_queue)
        bench.counter.forget(run)
    baseline, _ = workers[0]
    return window_of(
        first, last, {label: child.pid for label, (child, _) in started.items()}, baseline
    )


async def measure_shared_queue(
    bench: Bench,
    make_calls: CallMaker,
    workers: Sequence[tuple[str, Mapping[str, str]]],
    plan: SharedQueuePlan,
) -> list[dict[str, Any]]:
    """`plan.rounds` rounds of `workers` (label and environment; the first is the baseline)
    sharing one full queue: each round's window (`window_of`)."""
    if plan.calls <= 2 * plan.prefetch * len(workers) + plan.warmup * len(workers):
        raise ValueError("too few calls: the window would close before it opens")
    rounds: list[dict[str, Any]] = []
    for number in range(1, plan.rounds + 1):
        kept = await _round(bench, make_calls, workers, plan, number)
        rounds.append(kept)
        say(
            f"  shared queue, round {number} ({kept['seconds']:.1f} s): "
            + ", ".join(f"{label} {kept[label]['tps']:.0f} calls/s" for label, _ in workers)
            + "; over "
            + workers[0][0]
            + ": "
            + ", ".join(f"{label} {ratio:.3f}" for label, ratio in kept["ratio"].items())
            + "; CPU per call over it: "
            + ", ".join(f"{label} {ratio:.3f}" for label, ratio in kept["cpu_ratio"].items())
        )
    return rounds


def shared_queue_figures(
    rounds: Sequence[Mapping[str, Any]], labels: Sequence[str], prefix: str
) -> dict[str, float]:
    """From the rounds' windows, the medians: `<prefix><label>_tps` and
    `<prefix><label>_worker_cpu_ms` of every worker, and `<prefix><label>_vs_<baseline>` and
    `<prefix><label>_worker_cpu_vs_<baseline>` of every other (the baseline: the first label)."""
    baseline = labels[0]
    figures: dict[str, float] = {}
    for label in labels:
        figures[f"{prefix}{label}_tps"] = round(median(r[label]["tps"] for r in rounds), 1)
        figures[f"{prefix}{label}_worker_cpu_ms"] = round(
            median(r[label]["cpu_ms_per_call"] for r in rounds), 3
        )
    for label in labels[1:]:
        figures[f"{prefix}{label}_vs_{baseline}"] = round(
            median(r["ratio"][label] for r in rounds), 3
        )
        figures[f"{prefix}{label}_worker_cpu_vs_{baseline}"] = round(
            median(r["cpu_ratio"][label] for r in rounds), 3
        )
    return figures
