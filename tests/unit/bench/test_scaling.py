"""`bench.scaling`: the medians of the scaling rounds and their rows in the printed table."""

from __future__ import annotations

from typing import Any

import pytest

from bench.scaling import CPU_PARTS, scaling_figures, scaling_rows


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

    assert rows[0][:2] == ("scaling: 1 | 2 | 4 workers", "600 | 650 | 610 /s")
    assert rows[1][1] == "1.10 | 1.07"
    four = next(row for row in rows if row[0].startswith("CPU ms/call, 4 worker(s)"))
    assert "99% of the cores" in four[0]
    assert four[1].startswith("3.90 (worker 1.70, broker 1.00")


def test_a_run_without_the_phase_shows_one_empty_row() -> None:
    assert scaling_rows({}) == [("scaling (1 | 2 | 4 workers)", "-", "", "")]
