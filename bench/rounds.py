"""Runs compared with each other, taken in turns, and the progress lines the bench prints.

The machine's speed drifts within minutes, so runs are only compared with runs made next to
them: each round runs every contender once, in an order that turns round each round, and a
figure of several rounds is the median of the rounds' figures.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from statistics import median
from typing import Any, TypeVar

from bench.system import LatencyFigure, RunFigure

__all__ = [
    "Contender",
    "LatencyContender",
    "latency_rounds",
    "median_cpu",
    "median_cpu_ratio",
    "median_percentiles",
    "median_rate",
    "median_ratio",
    "paired_medians",
    "paired_rounds",
    "rounds_against",
    "say",
    "turn_order",
]

T = TypeVar("T")

# A run of one round (its number given): a worker, or the broker-limit loop.
Contender = Callable[[int], Awaitable[RunFigure]]
# A latency run of one round (its number given), at a fixed rate.
LatencyContender = Callable[[int], Awaitable[LatencyFigure]]
PERCENTILES = ("p50_ms", "p95_ms", "p99_ms")


def say(text: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {text}", flush=True)


def turn_order(contenders: Sequence[T], number: int) -> list[T]:
    """The order of round `number` (from 1): as given in odd rounds, reversed in even ones, so
    that the drift within a round favours no contender."""
    return list(contenders) if number % 2 == 1 else list(reversed(contenders))


async def paired_rounds(
    rounds: int,
    first: tuple[str, Contender],
    second: tuple[str, Contender],
    note: Callable[[Mapping[str, RunFigure]], str] = lambda _: "",
) -> list[dict[str, Any]]:
    """Each round runs both contenders once, and keeps their figures and first's rate over
    second's. Who goes first alternates, so that the machine's drift within a round favours
    neither."""
    kept: list[dict[str, Any]] = []
    for number in range(1, rounds + 1):
        order = turn_order((first, second), number)
        run = {name: await contender(number) for name, contender in order}
        (a, _), (b, _) = first, second
        ratio = run[a].tps / run[b].tps
        kept.append({a: run[a].as_dict(), b: run[b].as_dict(), "ratio": round(ratio, 3)})
        say(
            f"  round {number}: {a} {run[a].tps:.0f} calls/s, {b} {run[b].tps:.0f} calls/s, "
            f"ratio {ratio:.2f} {note(run)}".rstrip()
        )
    return kept


def paired_medians(rounds: Sequence[Mapping[str, Any]]) -> tuple[float, float, float]:
    """Of `paired_rounds` run as (`worker`, `broker_limit`): the worker's and the loop's rates
    and the ratio, each the median of the rounds' (the ratio is not the rates' quotient)."""
    return (
        round(median(r["worker"]["tps"] for r in rounds), 1),
        round(median(r["broker_limit"]["tps"] for r in rounds), 1),
        round(median(r["ratio"] for r in rounds), 3),
    )


async def rounds_against(
    rounds: int, baseline: tuple[str, Contender], others: Sequence[tuple[str, Contender]]
) -> list[dict[str, Any]]:
    """As `paired_rounds`, for any number of contenders measured against one: each round runs
    every contender once (the order turning round each round) and keeps their figures and,
    under `ratio`, each other contender's rate over the baseline's of the same round."""
    base, _ = baseline
    kept: list[dict[str, Any]] = []
    for number in range(1, rounds + 1):
        run = {
            name: await contender(number)
            for name, contender in turn_order((*others, baseline), number)
        }
        ratios = {name: round(run[name].tps / run[base].tps, 3) for name, _ in others}
        kept.append({**{name: figure.as_dict() for name, figure in run.items()}, "ratio": ratios})
        say(
            f"  round {number}: "
            + ", ".join(f"{name} {figure.tps:.0f} calls/s" for name, figure in run.items())
            + "; over "
            + base
            + ": "
            + ", ".join(f"{name} {ratio:.2f}" for name, ratio in ratios.items())
        )
    return kept


def median_rate(rounds: Sequence[Mapping[str, Any]], name: str) -> float:
    """Contender `name`'s calls/s over the rounds of `rounds_against`: the median."""
    return round(float(median(r[name]["tps"] for r in rounds)), 1)


def median_ratio(rounds: Sequence[Mapping[str, Any]], name: str) -> float:
    """Contender `name`'s rate over the baseline's, each round's, the median (not the quotient
    of the median rates)."""
    return round(float(median(r["ratio"][name] for r in rounds)), 3)


def _cpu_of(round_: Mapping[str, Any], name: str, group: str) -> float:
    """Milliseconds of `group`'s CPU per call in contender `name`'s metered run of a round."""
    return float(round_[name]["cpu"]["cpu_ms_per_call"][group])


def median_cpu(rounds: Sequence[Mapping[str, Any]], name: str, group: str) -> float:
    """Milliseconds of `group`'s CPU per call in contender `name`'s metered runs: the median."""
    return round(float(median(_cpu_of(r, name, group) for r in rounds)), 3)


def median_cpu_ratio(
    rounds: Sequence[Mapping[str, Any]], name: str, base: str, group: str
) -> float:
    """`group`'s CPU per call in contender `name`'s run over that in `base`'s of the same
    round, the median of the rounds'."""
    return round(
        float(median(_cpu_of(r, name, group) / _cpu_of(r, base, group) for r in rounds)), 3
    )


async def latency_rounds(
    rounds: int, contenders: Sequence[tuple[str, LatencyContender]]
) -> list[dict[str, Any]]:
    """Each round runs every contender's latency run once, the order turning round each round,
    and keeps their figures. One 10-second run's p99 is its worst 1 %: a single pause of the
    machine moves it threefold, so percentiles are compared as medians of rounds."""
    kept: list[dict[str, Any]] = []
    for number in range(1, rounds + 1):
        run: dict[str, Any] = {}
        for name, contender in turn_order(contenders, number):
            figure = await contender(number)
            run[name] = figure.as_dict()
            say(
                f"  round {number}, {name} at {figure.offered_rate:.0f}/s: p50 "
                f"{figure.p50_ms:.1f} ms, p95 {figure.p95_ms:.1f} ms, p99 {figure.p99_ms:.1f} ms"
                f"{f' ({figure.failures} failed)' if figure.failures else ''}"
            )
        kept.append(run)
    return kept


def median_percentiles(
    rounds: Sequence[Mapping[str, Any]], name: str, *, prefix: str = ""
) -> dict[str, float]:
    """`p50_ms`, `p95_ms`, `p99_ms` of contender `name` (their keys after `prefix`): each the
    median of the rounds'."""
    return {f"{prefix}{key}": round(median(r[name][key] for r in rounds), 2) for key in PERCENTILES}
