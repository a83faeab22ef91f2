"""`bench.scaling`: the medians of the scaling rounds and their rows in the printed table."""

from __future__ import annotations

from typing import Any

import pytest

from bench.scaling import CPU_PARTS, fixed_rate_figures, scaling_figures, scaling_rows


def _run(tps: float, worker: float, busy: float) -> dict[str, Any]:
    """A run's figure as `RunFigure.as_dict()` keeps it, with its CPU split."""
    split = {"worker": worker, "broker": 1.0, "database": 0.8, "bench": 0.3, "other": 0.1}
    split["total"] = sum(split.values())
    return {"tps": tps, "cpu": {"cpu_ms_per_call": split, "busy_share": busy, "calls": 100}}


ROUNDS = [
    {"1": _run(600, 1.2, 0.90), "2": _run(660, 1.4, 0.97), "4": _run(640, 1.6, 0.99)},
    {"4": _run(500, 1.8, 0.98), "2": _run(600, 1.5, 0.96), "1": _run(400, 1.1, 0.85)},
    {"1": _run(620, 1.3, 0.91), "2": _run(650, 1.3, 0.98), "4": _run(610, 1.7, 0.99)},
]


def test_each_figure_is_the_median_of_its_rounds_by_worker_count() -> None:
    figures = scaling_figures(ROUNDS)

    assert figures["scaling_tps"] == {"1": 600.0, "2": 650.0, "4": 610.0}
    assert figures["cpu_ms_per_call"]["1"]["worker"] == 1.2
    assert figures["cpu_ms_per_call"]["4"]["worker"] == 1.7
    assert set(figures["cpu_ms_per_call"]["2"]) == set(CPU_PARTS)
    assert figures["scaling_busy_share"] == {"1": 0.9, "2": 0.97, "4": 0.99}


def test_the_gain_over_one_worker_is_taken_within_each_round_then_the_median() -> None:
    figures = scaling_figures(ROUNDS)

    # Round ratios for 2 workers: 1.1, 1.5, 1.048; for 4: 1.067, 1.25, 0.984.
    assert figures["scaling_vs_1"]["2"] == pytest.approx(1.1)
    assert figures["scaling_vs_1"]["4"] == pytest.approx(1.067, abs=1e-3)
    assert "1" not in figures["scaling_vs_1"]


def test_without_a_one_worker_run_there_is_no_gain_to_report() -> None:
    figures = scaling_figures([{"2": _run(600, 1.0, 0.9)}])

    assert "scaling_vs_1" not in figures
    assert figures["scaling_tps"] == {"2": 600.0}


def test_the_table_shows_the_rates_side_by_side_and_one_split_a_count() -> None:
    rows = scaling_rows(scaling_figures(ROUNDS))

    assert rows[0] == ("scaling: 1 | 2 | 4 workers", "600 | 650 | 610 /s")
    assert rows[1][1] == "1.10 | 1.07"
    four = next(row for row in rows if row[0].startswith("CPU ms/call, 4 worker(s)"))
    assert "99% of the cores" in four[0]
    assert four[1].startswith("3.90 (worker 1.70, broker 1.00")


def test_a_run_without_the_phase_shows_one_empty_row() -> None:
    assert scaling_rows({}) == [("scaling (1 | 2 | 4 workers)", "-")]


def _fixed(broker: float, database: float, p99: float = 20.0) -> dict[str, Any]:
    """A fixed-rate run as `LatencyFigure.as_dict()` keeps it, with its CPU split."""
    split = {"worker": 1.5, "broker": broker, "database": database, "bench": 0.4, "other": 0.1}
    split["total"] = sum(split.values())
    return {"p99_ms": p99, "cpu": {"cpu_ms_per_call": split, "busy_share": 0.4, "calls": 2250}}


def _with_fixed(run: dict[str, Any], fixed: dict[str, Any]) -> dict[str, Any]:
    return {**run, "fixed_rate": fixed}


FIXED_ROUNDS = [
    {
        "1": _with_fixed(_run(600, 1.2, 0.9), _fixed(1.2, 0.3, 18.0)),
        "2": _with_fixed(_run(650, 1.4, 0.9), _fixed(1.5, 0.3, 22.0)),
        "4": _with_fixed(_run(640, 1.6, 0.9), _fixed(2.0, 0.4, 30.0)),
    },
    {
        "4": _with_fixed(_run(500, 1.8, 0.9), _fixed(1.8, 0.6, 26.0)),
        "2": _with_fixed(_run(600, 1.5, 0.9), _fixed(1.0, 0.5, 21.0)),
        "1": _with_fixed(_run(400, 1.1, 0.9), _fixed(1.0, 0.5, 19.0)),
    },
    {
        "1": _with_fixed(_run(620, 1.3, 0.9), _fixed(1.6, 0.4, 17.0)),
        "2": _with_fixed(_run(650, 1.3, 0.9), _fixed(2.0, 0.4, 23.0)),
        "4": _with_fixed(_run(610, 1.7, 0.9), _fixed(2.2, 0.6, 28.0)),
    },
]


def test_the_fixed_rate_cost_is_the_shared_cpu_over_one_workers_within_each_round() -> None:
    figures = fixed_rate_figures(FIXED_ROUNDS)

    # Broker + database, 1 / 2 / 4 workers: 1.5, 1.8, 2.4; 1.5, 1.5, 2.4; 2.0, 2.4, 2.8.
    # Over one worker's: 2 workers 1.2, 1.0, 1.2; 4 workers 1.6, 1.6, 1.4.
    assert figures["scaling_fixed_rate_cost_vs_1"] == pytest.approx({"1": 1.0, "2": 1.2, "4": 1.6})
    assert figures["scaling_fixed_rate_cpu_ms_per_call"]["2"]["shared"] == pytest.approx(1.8)
    assert figures["scaling_fixed_rate_cpu_ms_per_call"]["4"]["broker"] == pytest.approx(2.0)
    assert set(figures["scaling_fixed_rate_cpu_ms_per_call"]["1"]) == {*CPU_PARTS, "shared"}
    assert figures["scaling_fixed_rate_p99_ms"] == {"1": 18.0, "2": 22.0, "4": 28.0}


def test_the_cost_is_taken_round_by_round_not_from_the_medians() -> None:
    def round_of(one: float, two: float) -> dict[str, Any]:
        return {
            "1": _with_fixed(_run(600, 1.2, 0.9), _fixed(one, 0.0)),
            "2": _with_fixed(_run(600, 1.2, 0.9), _fixed(two, 0.0)),
        }

    # Round ratios 1.1, 1.1 and 0.33: the median 1.1. The medians' ratio would be 1.1 / 2.0.
    figures = fixed_rate_figures([round_of(1.0, 1.1), round_of(2.0, 2.2), round_of(3.0, 1.0)])

    assert figures["scaling_fixed_rate_cost_vs_1"]["2"] == pytest.approx(1.1)


def test_without_fixed_rate_runs_there_is_no_fixed_rate_figure() -> None:
    figures = fixed_rate_figures(ROUNDS)

    assert figures["scaling_fixed_rate_cpu_ms_per_call"] == {}
    assert "scaling_fixed_rate_cost_vs_1" not in figures


def test_the_table_shows_the_fixed_rate_split_and_the_idle_worker() -> None:
    results = {
        **scaling_figures(FIXED_ROUNDS),
        **fixed_rate_figures(FIXED_ROUNDS),
        "scaling_fixed_rate_per_s": 150.0,
        "idle_worker_core_share": 0.0042,
    }

    rows = scaling_rows(results)

    two = next(row for row in rows if row[0].startswith("CPU ms/call at 150/s, 2 worker(s)"))
    assert two[1].endswith("; broker + database 1.20 x one worker's")
    assert rows[-1] == ("idle_worker_core_share (one worker, no calls)", "0.42%")
    assert all(len(row) == 2 for row in rows)
