"""`bench.shared_queue`: a window's figures, and their medians over the rounds."""

from __future__ import annotations

from typing import Any

import pytest

from bench.cpu import TICKS_PER_SECOND, CpuSample, MachineTicks, ProcessTicks
from bench.shared_queue import Reading, shared_queue_figures, window_of


def _reading(at: float, answered: dict[str, int], ticks: dict[int, int]) -> Reading:
    processes = {pid: ProcessTicks(ppid=1, ticks=used) for pid, used in ticks.items()}
    return Reading(at, answered, CpuSample(processes, MachineTicks(busy=0, elapsed=0)))


def test_a_window_counts_each_worker_between_its_two_readings() -> None:
    pids = {"off": 11, "default": 12}
    first = _reading(10.0, {"off": 300, "default": 310}, {11: 50, 12: 60})
    # Over 20 s: off answers 4,000 calls with 4 s of CPU, default 3,800 with 4 s.
    last = _reading(
        30.0,
        {"off": 4_300, "default": 4_110},
        {11: 50 + 4 * TICKS_PER_SECOND, 12: 60 + 4 * TICKS_PER_SECOND},
    )

    window = window_of(first, last, pids, "off")

    assert window["seconds"] == 20.0
    assert window["off"] == {"calls": 4_000, "tps": 200.0, "cpu_ms_per_call": 1.0}
    assert window["default"]["tps"] == 190.0
    assert window["ratio"] == {"default": 0.95}
    assert window["cpu_ratio"] == {"default": pytest.approx(1.053, abs=1e-3)}
    assert "off" not in window["ratio"]


def test_a_worker_that_answered_nothing_in_the_window_fails_the_round() -> None:
    pids = {"off": 11, "default": 12}
    first = _reading(0.0, {"off": 300, "default": 300}, {11: 0, 12: 0})
    last = _reading(5.0, {"off": 900, "default": 300}, {11: 100, 12: 100})

    with pytest.raises(RuntimeError, match="default worker answered nothing"):
        window_of(first, last, pids, "off")


def _window(off: float, default: float, cpu_off: float, cpu_default: float) -> dict[str, Any]:
    return {
        "off": {"tps": off, "cpu_ms_per_call": cpu_off},
        "default": {"tps": default, "cpu_ms_per_call": cpu_default},
        "ratio": {"default": round(default / off, 3)},
        "cpu_ratio": {"default": round(cpu_default / cpu_off, 3)},
    }


def test_each_figure_is_the_median_of_its_rounds_and_each_ratio_that_of_the_rounds_ratios() -> None:
    rounds = [
        _window(200, 196, 1.00, 1.02),
        _window(150, 141, 1.30, 1.38),
        _window(180, 175, 1.10, 1.13),
    ]

    figures = shared_queue_figures(rounds, ["off", "default"], "tracing_shared_")

    assert figures == {
        "tracing_shared_off_tps": 180.0,
        "tracing_shared_default_tps": 175.0,
        "tracing_shared_off_worker_cpu_ms": 1.1,
        "tracing_shared_default_worker_cpu_ms": 1.13,
        # Round ratios 0.98, 0.94, 0.972: not 175 / 180.
        "tracing_shared_default_vs_off": 0.972,
        "tracing_shared_default_worker_cpu_vs_off": 1.027,
    }
