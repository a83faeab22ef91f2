"""`bench.results_page`: the results page shows the run bench/results.json holds."""

from __future__ import annotations

import orjson
import pytest

from bench.results_page import (
    BEGIN_MARKER,
    END_MARKER,
    RESULTS_JSON,
    RESULTS_PAGE,
    newest_run_block,
    with_newest_run,
)
from bench.run import PHASES
from tests.unit.bench.machines import machine

MACHINE = machine(load_average=0.31)


def test_the_pages_table_is_the_one_results_json_gives() -> None:
    page = RESULTS_PAGE.read_text(encoding="utf-8")
    results = orjson.loads(RESULTS_JSON.read_bytes())

    assert page.count(BEGIN_MARKER) == 1 and page.count(END_MARKER) == 1
    assert with_newest_run(page, results) == page, (
        "bench/RESULTS.md's newest run: run python -m bench.results_page"
    )


def test_the_block_is_the_machine_then_the_summary() -> None:
    results = {"machine": MACHINE, "config": {"phases": list(PHASES)}, "p99_ms": 12.5}

    block = newest_run_block(results).splitlines()

    assert block[0] == (
        "2026-12-05 10:11 UTC, commit abc1234: 2 cores (AMD EPYC), 24 GB, PostgreSQL 15.20,"
        " RabbitMQ 3.10.8, Python 3.11.7 (aio-pika 10.2.1, aiormq 7.2.4, psycopg 3.3.9),"
        " load average 0.31 at the start."
    )
    assert block[1] == ""
    assert block[2] == "| figure | measured | target | met |"
    assert any(line.endswith("| – / – / 12.5 ms | p99 ≤ 15 ms | yes |") for line in block)


def test_a_run_of_some_phases_and_a_failed_phase_say_so() -> None:
    results = {
        "machine": MACHINE,
        "config": {"phases": ["latency", "tracing"]},
        "errors": {"tracing": "RuntimeError: no span\nTraceback ..."},
    }

    block = newest_run_block(results).splitlines()

    assert block[1] == "Phases run: latency, tracing."
    assert block[2] == "The phase tracing failed: `RuntimeError: no span`."


def test_the_block_is_replaced_in_place() -> None:
    page = f"before\n{BEGIN_MARKER}\n| stale |\n{END_MARKER}\nafter\n"

    rendered = with_newest_run(page, {"machine": MACHINE, "config": {"phases": list(PHASES)}})

    assert rendered.startswith(f"before\n{BEGIN_MARKER}\n2026-12-05 10:11 UTC")
    assert rendered.endswith(f"|\n{END_MARKER}\nafter\n")
    assert "stale" not in rendered
    with pytest.raises(ValueError, match="markers"):
        with_newest_run("no markers here", {})
