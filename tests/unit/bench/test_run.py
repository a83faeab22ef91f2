"""`bench.run`'s printed tables: the raw figures, then the summary, the one that judges them."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

from bench import run
from bench.run import render_table
from bench.summary import evaluate, summary_rows
from tests.unit.bench.machines import machine

MACHINE = machine(load_average=1.5)


def _results() -> dict[str, Any]:
    """A run with targets both met and missed, as `run_bench` leaves it."""
    results: dict[str, Any] = {
        "machine": MACHINE,
        "broker_limit_tps": 1000.0,  # the old table's hint was 0.75 × this: "(750 /s)"
        "peer_tps": 300.0,  # ... and 2 × this: "(600 /s)"
        "throughput": 621.0,
        "ratio_vs_broker": 0.62,  # under its 0.75: missed
        "ratio_vs_peer": 2.07,  # met
        "p50_ms": 4.25,
        "p95_ms": 9.5,
        "p99_ms": 22.5,  # over its 15 ms: missed
        "latency_floor_p50_ms": 2.5,
        "latency_floor_p99_ms": 8.25,
        "latency_committed_floor_p50_ms": 5.5,
        "latency_committed_floor_p99_ms": 19.0,
        "cluster_ratio": 0.43,
        "rss_mb": 131.0,  # over its 120 MB: missed
        "cost_1m_vs_10k": 1.04,  # met
        "errors": {"seen": "RuntimeError: no seen\ntraceback"},
        "duration_s": 812.4,
        "logs": "/tmp/ltm-bench-logs",
    }
    results["targets"] = evaluate(results)
    results["summary"] = summary_rows(results)
    return results


def _row(table: str, label: str) -> str:
    return next(line for line in table.splitlines() if line.startswith(label + " "))


def test_the_raw_table_has_the_figures_and_no_target_or_met_column() -> None:
    results = _results()
    # The run holds targets met and missed: the raw table must leave them to the summary.
    assert results["targets"]["p99_ms"]["met"] is False
    assert results["targets"]["ratio_vs_peer"]["met"] is True

    table = render_table(results)
    lines = table.splitlines()

    assert lines[2].split() == ["figure", "measured"]
    assert "NOT MET" not in table
    assert not re.search(r"\bmet\b", table, re.IGNORECASE)
    assert "target" not in table.lower()
    for judged in results["targets"].values():
        assert judged["target"] not in table
    assert "≥" not in table and "≤" not in table
    assert "750" not in table and "600 /s" not in table  # the computed target hints are gone
    assert _row(table, "ratio_vs_broker").split() == ["ratio_vs_broker", "0.62"]
    assert _row(table, "ratio_vs_peer").split() == ["ratio_vs_peer", "2.07"]
    assert _row(table, "p99_ms").split() == ["p99_ms", "22.5", "ms"]
    assert _row(table, "rss_mb").split() == ["rss_mb", "131", "MB"]
    assert _row(table, "cost_1m_vs_10k").split() == ["cost_1m_vs_10k", "1.04", "x"]
    assert _row(table, "throughput (worker)").endswith("621 /s")
    assert _row(table, "latency_floor p50 | p99 (broker loop, same rate)").endswith(
        "2.50 | 8.25 ms"
    )
    assert _row(table, "latency_committed_floor p50 | p99 (loop committing each call)").endswith(
        "5.50 | 19.0 ms"
    )
    assert _row(table, "cluster_ratio (3 replicas, one machine)").endswith("0.43")


def test_the_raw_table_keeps_the_machine_the_busy_note_the_failures_and_the_logs() -> None:
    table = render_table(_results())
    lines = table.splitlines()

    assert lines[0].startswith("LTM bench, 2026-12-05 10:11 UTC, commit abc1234: 2 cores")
    assert any(line.startswith("note: the machine was already busy at start") for line in lines)
    assert "phase seen failed: RuntimeError: no seen" in lines
    assert lines[-1] == "took 812.4 s; logs in /tmp/ltm-bench-logs"
    assert "median of its rounds" not in table  # the summary shows the rounds


def test_main_prints_the_raw_table_then_the_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    results = {**_results(), "logs": str(tmp_path)}

    @contextlib.contextmanager
    def no_services() -> Iterator[None]:
        yield None

    async def measured(config: run.Config, services: object) -> dict[str, Any]:
        return results

    def run_loop(coroutine: Coroutine[Any, Any, dict[str, Any]]) -> dict[str, Any]:
        return asyncio.run(coroutine)

    monkeypatch.setattr(run, "bench_services", no_services)
    monkeypatch.setattr(run, "run_bench", measured)
    monkeypatch.setattr("uvloop.run", run_loop)

    status = run.main(["--output", str(tmp_path / "results.json")])

    printed = capsys.readouterr().out
    raw, _, summary = printed.partition("Summary (every target of the bench):\n")
    assert status == 1  # a phase failed
    assert raw.strip().startswith("LTM bench, ")
    assert "NOT MET" not in raw and "target" not in raw
    assert summary.splitlines()[0].split() == ["figure", "measured", "target", "met"]
    assert "p99 ≤ 15 ms" in summary
    assert (tmp_path / "results.json").exists()


def test_the_tracing_phase_takes_three_times_the_others_rounds_unless_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("BENCH_ROUNDS", raising=False)
    monkeypatch.delenv("BENCH_TRACING_ROUNDS", raising=False)

    assert (run.parse_args([]).rounds, run.parse_args([]).tracing_rounds) == (3, 9)
    assert run.parse_args(["--rounds", "1"]).tracing_rounds == 3
    assert run.parse_args(["--rounds", "1", "--tracing-rounds", "7"]).tracing_rounds == 7
