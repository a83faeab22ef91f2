"""`bench.rounds`: contenders take turns, so that the machine's drift favours none."""

from __future__ import annotations

import asyncio

from bench.rounds import (
    Contender,
    median_cpu,
    median_cpu_ratio,
    median_percentiles,
    median_rate,
    median_ratio,
    paired_medians,
    rounds_against,
    turn_order,
)
from bench.system import RunFigure


def test_the_order_turns_round_every_other_round() -> None:
    assert turn_order([1, 2, 4], 1) == [1, 2, 4]
    assert turn_order([1, 2, 4], 2) == [4, 2, 1]
    assert turn_order([1, 2, 4], 3) == [1, 2, 4]


def _figure(tps: float) -> RunFigure:
    return RunFigure(
        calls=100,
        seconds=100 / tps,
        tps=tps,
        failures=0,
        publish_rate=None,
        statuses={"updated": 100},
        capped=False,
    )


def test_each_contender_is_measured_against_the_baseline_of_its_own_round() -> None:
    rates = {"off": [500.0, 400.0], "default": [480.0, 396.0], "on": [400.0, 340.0]}
    order: list[str] = []

    def contender(name: str) -> Contender:
        async def run(number: int) -> RunFigure:
            order.append(name)
            return _figure(rates[name][number - 1])

        return run

    rounds = asyncio.run(
        rounds_against(
            2,
            ("off", contender("off")),
            [("default", contender("default")), ("on", contender("on"))],
        )
    )

    assert order == ["default", "on", "off", "off", "on", "default"]
    assert rounds[0]["ratio"] == {"default": 0.96, "on": 0.8}
    assert rounds[1]["ratio"] == {"default": 0.99, "on": 0.85}
    assert rounds[1]["off"]["tps"] == 400.0


def test_paired_medians_are_each_figures_median_and_the_ratio_is_the_rounds() -> None:
    rounds = [
        {"worker": {"tps": 500.0}, "broker_limit": {"tps": 600.0}, "ratio": 0.833},
        {"worker": {"tps": 420.0}, "broker_limit": {"tps": 700.0}, "ratio": 0.6},
        {"worker": {"tps": 610.0}, "broker_limit": {"tps": 650.0}, "ratio": 0.938},
    ]

    # 500 / 650 would be 0.769: the ratio is taken within each round, then its median.
    assert paired_medians(rounds) == (500.0, 650.0, 0.833)


def test_a_contenders_median_ratio_is_taken_within_rounds_not_from_median_rates() -> None:
    rounds = [
        {"loop": {"tps": 600.0}, "replay": {"tps": 540.0}, "ratio": {"replay": 0.9}},
        {"loop": {"tps": 700.0}, "replay": {"tps": 490.0}, "ratio": {"replay": 0.7}},
        {"loop": {"tps": 650.0}, "replay": {"tps": 617.5}, "ratio": {"replay": 0.95}},
    ]

    assert (median_rate(rounds, "replay"), median_rate(rounds, "loop")) == (540.0, 650.0)
    assert median_ratio(rounds, "replay") == 0.9  # 540 / 650 would be 0.83


def test_a_contenders_cpu_per_call_is_over_the_baselines_of_the_same_round() -> None:
    def metered(worker_ms: float) -> dict[str, object]:
        return {"tps": 900.0, "cpu": {"cpu_ms_per_call": {"worker": worker_ms, "rest": 0.5}}}

    rounds = [
        {"off": metered(0.60), "default": metered(0.66)},
        {"off": metered(0.70), "default": metered(0.70)},
        {"off": metered(0.65), "default": metered(0.78)},
    ]

    assert (median_cpu(rounds, "off", "worker"), median_cpu(rounds, "default", "worker")) == (
        0.65,
        0.7,
    )
    # Each round's own quotient (1.1, 1.0, 1.2), the median; not 0.70 / 0.65 (1.077).
    assert median_cpu_ratio(rounds, "default", "off", "worker") == 1.1


def test_median_percentiles_of_one_contender_under_a_prefix() -> None:
    rounds = [
        {"worker": {"p50_ms": 6.0, "p95_ms": 17.0, "p99_ms": 36.7}, "floor": {}},
        {"worker": {"p50_ms": 5.8, "p95_ms": 13.6, "p99_ms": 19.8}, "floor": {}},
        {"worker": {"p50_ms": 7.0, "p95_ms": 19.0, "p99_ms": 47.7}, "floor": {}},
    ]

    assert median_percentiles(rounds, "worker", prefix="create_") == {
        "create_p50_ms": 6.0,
        "create_p95_ms": 17.0,
        "create_p99_ms": 36.7,
    }
