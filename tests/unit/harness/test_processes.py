"""`harness.processes`: what a worker's `/metrics` page says it answered."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, generate_latest

from harness.processes import calls_answered


def test_a_workers_count_sums_every_tool_status_and_replay() -> None:
    registry = CollectorRegistry()
    calls = Counter(
        "ltm_tool_calls", "Tool calls.", ["tool", "status", "replayed"], registry=registry
    )
    calls.labels("update", "updated", "false").inc(40)
    calls.labels("update", "rejected", "false").inc(2)
    calls.labels("create", "created", "true").inc(3)
    Counter("ltm_dead_lettered", "Not calls answered.", registry=registry).inc(7)

    assert calls_answered(generate_latest(registry).decode()) == 45


def test_a_worker_that_answered_nothing_yet_counts_zero() -> None:
    registry = CollectorRegistry()
    Counter("ltm_tool_calls", "Tool calls.", ["tool", "status", "replayed"], registry=registry)

    assert calls_answered(generate_latest(registry).decode()) == 0
