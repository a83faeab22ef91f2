"""`bench.summary`: every target, measured or not, met or not, from the results alone."""

from __future__ import annotations

from typing import Any

from bench.summary import NOT_JUDGED, evaluate, markdown_table, summary_rows, text_table


def _row(results: dict[str, Any], starts: str) -> dict[str, str]:
    return next(row for row in summary_rows(results) if row["figure"].startswith(starts))


def test_a_figure_not_measured_is_neither_met_nor_missed() -> None:
    targets = evaluate({})

    assert all(target["met"] is None for target in targets.values())
    assert all(row["met"] == NOT_JUDGED for row in summary_rows({}))
    assert all(row["measured"] == NOT_JUDGED for row in summary_rows({}))


def test_every_target_of_the_bench_is_in_the_summary() -> None:
    assert set(evaluate({})) == {
        "ratio_vs_broker",
        "ratio_vs_peer",
        "ratio_vs_broker_prepublished",
        "ratio_vs_broker_replay",
        "p99_ms",
        "p99_vs_floor",
        "p99_vs_create_p99",
        "create_ratio_vs_broker",
        "create_p99_ms",
        "tracing_default_vs_off",
        "tracing_on_vs_off",
        "tracing_shared_default_vs_off",
        "tracing_shared_on_vs_off",
        "tracing_off_p99_ms",
        "scaling_fixed_rate_cost_vs_1.2",
        "scaling_fixed_rate_cost_vs_1.4",
        "idle_worker_core_share",
        "cluster_p99_vs_single_at_100",
        "cost_1m_vs_10k",
        "rss_mb",
    }


def test_a_limit_reached_exactly_is_met_and_the_least_beyond_it_is_not() -> None:
    at = evaluate({"ratio_vs_broker_prepublished": 0.85, "tracing_on_vs_off": 0.8})
    below = evaluate({"ratio_vs_broker_prepublished": 0.849, "tracing_on_vs_off": 0.799})

    assert at["ratio_vs_broker_prepublished"]["met"] is True
    assert at["tracing_on_vs_off"]["met"] is True
    assert below["ratio_vs_broker_prepublished"]["met"] is False
    assert below["tracing_on_vs_off"]["met"] is False


def test_the_idle_worker_is_held_under_one_percent_not_at_it() -> None:
    assert evaluate({"idle_worker_core_share": 0.0099})["idle_worker_core_share"]["met"] is True
    assert evaluate({"idle_worker_core_share": 0.01})["idle_worker_core_share"]["met"] is False


def test_the_tail_is_held_to_twice_the_floor_measured_in_the_same_run() -> None:
    results = {"p99_ms": 40.0, "latency_floor_p99_ms": 20.0}

    assert evaluate(results)["p99_vs_floor"] == {
        "target": "≤ 2 ×",
        "measured": 2.0,
        "met": True,
    }
    assert evaluate({**results, "p99_ms": 40.2})["p99_vs_floor"]["met"] is False
    assert _row(results, "the tail")["measured"] == "40.0 / 20.0 ms = 2.00"
    # Without the floor there is nothing to hold the tail to.
    assert evaluate({"p99_ms": 40.0})["p99_vs_floor"]["met"] is None


def test_the_committing_floor_is_reported_beside_the_tail_held_to_nothing() -> None:
    results = {
        "p99_ms": 30.0,
        "latency_committed_floor_p50_ms": 6.2,
        "latency_committed_floor_p95_ms": 14.0,
        "latency_committed_floor_p99_ms": 24.0,
    }

    assert _row(results, "the committing floor")["measured"] == "6.20 / 14.0 / 24.0 ms"
    over = _row(results, "the tail over the committing floor")
    assert over["measured"] == "30.0 / 24.0 ms = 1.25"
    assert (over["target"], over["met"]) == ("", NOT_JUDGED)
    # It judges nothing: the tail's target is the broker floor's alone.
    assert evaluate(results)["p99_vs_floor"]["met"] is None


def test_the_untraced_worker_run_twice_is_reported_as_the_rounds_spread() -> None:
    results = {
        "tracing_off_again_tps": 870.0,
        "tracing_off_tps": 940.0,
        "tracing_off_again_vs_off": 0.92,
    }

    row = _row(results, "the same untraced worker again")
    # The median of the rounds' ratios, not the quotient of the median rates (0.93).
    assert row["measured"] == "870 / 940 calls/s = 0.92"
    assert (row["target"], row["met"]) == ("", NOT_JUDGED)
    assert "tracing_off_again_vs_off" not in evaluate(results)


def test_the_traced_workers_cpu_per_call_is_reported_beside_the_rates() -> None:
    results = {
        "tracing_off_worker_cpu_ms": 0.66,
        "tracing_default_worker_cpu_ms": 0.71,
        "tracing_on_worker_cpu_ms": 0.85,
        "tracing_default_worker_cpu_vs_off": 1.08,
        "tracing_on_worker_cpu_vs_off": 1.29,
        "tracing_off_again_worker_cpu_vs_off": 1.02,
    }

    row = _row(results, "the worker's CPU per call, tracing")
    assert row["measured"] == "0.66 / 0.71 / 0.85 ms (1.08, 1.29, 1.02)"
    assert (row["target"], row["met"]) == ("", NOT_JUDGED)
    assert _row({}, "the worker's CPU per call, tracing")["measured"] == NOT_JUDGED


def test_the_side_by_side_rows_show_each_rounds_ratio_and_judge_the_median() -> None:
    results = {
        "tracing_shared_off_tps": 250.0,
        "tracing_shared_default_tps": 240.0,
        "tracing_shared_default_vs_off": 0.96,
        "tracing_shared_off_again_tps": 251.0,
        "tracing_shared_off_again_vs_off": 1.01,
        "tracing_shared_off_worker_cpu_ms": 1.2,
        "tracing_shared_default_worker_cpu_ms": 1.25,
        "tracing_shared_on_worker_cpu_ms": 1.5,
        "tracing_shared_default_worker_cpu_vs_off": 1.04,
        "tracing_shared_on_worker_cpu_vs_off": 1.25,
        "tracing_shared_off_again_worker_cpu_vs_off": 0.99,
        "details": {
            "tracing_shared_rounds": [
                {"ratio": {"default": 0.95, "on": 0.8, "off_again": 1.02}},
                {"ratio": {"default": 0.97, "on": 0.82, "off_again": 1.0}},
            ]
        },
    }

    row = _row(results, "side by side on one queue: tracing at the default")
    assert row["figure"].endswith("(rounds 0.95, 0.97)")
    assert (row["measured"], row["met"]) == ("240 / 250 calls/s = 0.96", "yes")
    again = _row(results, "side by side on one queue: the same untraced worker")
    assert again["figure"].endswith("(rounds 1.02, 1.00)")
    assert (again["target"], again["met"]) == ("", NOT_JUDGED)
    cpu = _row(results, "side by side on one queue: the worker's CPU per call")
    assert cpu["measured"] == "1.20 / 1.25 / 1.50 ms (1.04, 1.25, 0.99)"
    assert evaluate(results)["tracing_shared_on_vs_off"]["met"] is None


def test_the_creations_row_shows_the_ratio_it_judges_and_its_rounds() -> None:
    results = {
        "create_throughput": 700.0,
        "create_broker_limit_tps": 1000.0,
        "create_ratio_vs_broker": 0.76,
        "details": {"create_throughput_rounds": [{"ratio": 0.74}, {"ratio": 0.76}, {"ratio": 0.8}]},
    }

    row = _row(results, "creations: worker / their broker loop")
    # The median of the rounds' ratios, which is judged, not the median rates' quotient (0.70).
    assert row["measured"] == "700 / 1,000 calls/s = 0.76"
    assert row["figure"].endswith("(rounds 0.74, 0.76, 0.80)")
    assert row["met"] == "yes"


def test_the_replay_of_dead_letters_is_held_to_the_loop_on_a_full_queue() -> None:
    results = {
        "config": {"replay_letters": 10_000},
        "replay_tps": 900.0,
        "throughput_prepublished": 1000.0,
        "broker_limit_prepublished_tps": 1050.0,
        "ratio_vs_broker_replay": 0.86,
        "ratio_vs_broker_prepublished": 0.95,
        "details": {
            "backlog_rounds": [
                {"ratio": {"worker": 0.95, "replay": 0.86}},
                {"ratio": {"worker": 0.97, "replay": 0.84}},
                {"ratio": {"worker": 0.93, "replay": 0.9}},
            ]
        },
    }

    replay = _row(results, "a replay of 10,000 dead letters")
    assert replay["figure"].endswith("(rounds 0.86, 0.84, 0.90)")
    assert replay["measured"] == "900 / 1,050 calls/s = 0.86"
    assert replay["met"] == "yes"
    backlog = _row(results, "on a full queue")
    assert backlog["figure"].endswith("(rounds 0.95, 0.97, 0.93)")
    assert (
        evaluate({**results, "ratio_vs_broker_replay": 0.84})["ratio_vs_broker_replay"]["met"]
        is False
    )


def test_the_updates_tail_is_no_worse_than_the_creates() -> None:
    assert evaluate({"p99_ms": 24.5, "create_p99_ms": 24.5})["p99_vs_create_p99"]["met"] is True
    assert evaluate({"p99_ms": 57.9, "create_p99_ms": 24.5})["p99_vs_create_p99"]["met"] is False


def test_scale_out_is_judged_for_two_and_four_workers_apart() -> None:
    results = {"scaling_fixed_rate_cost_vs_1": {"1": 1.0, "2": 1.15, "4": 1.31}}

    targets = evaluate(results)

    assert targets["scaling_fixed_rate_cost_vs_1.2"]["met"] is True
    assert targets["scaling_fixed_rate_cost_vs_1.4"]["met"] is False
    assert _row(results, "broker + database CPU per call at 150 calls/s, 4")["met"] == "no"


def test_the_cluster_is_held_to_three_times_the_single_node_at_100() -> None:
    results = {"cluster_p99_ms_at_100": 90.0, "single_node_p99_ms_at_100": 30.0}

    assert evaluate(results)["cluster_p99_vs_single_at_100"]["met"] is True
    results["cluster_p99_ms_at_100"] = 91.0
    assert evaluate(results)["cluster_p99_vs_single_at_100"]["met"] is False
    # The cluster's tail at the latency run's rate is reported only.
    assert _row({"cluster_p99_ms": 4200.0}, "p99 at 200")["met"] == NOT_JUDGED


def test_the_row_shows_the_figures_a_ratio_comes_from_and_the_rounds() -> None:
    results = {
        "throughput": 487.0,
        "broker_limit_tps": 600.0,
        "ratio_vs_broker": 0.76,
        "details": {"throughput_rounds": [{"ratio": 0.9}, {"ratio": 0.71}, {"ratio": 0.76}]},
    }

    row = _row(results, "steady throughput")

    assert row == {
        "figure": "steady throughput: worker / broker loop (rounds 0.90, 0.71, 0.76)",
        "measured": "487 / 600 calls/s = 0.76",
        "target": "≥ 0.75",
        "met": "yes",
    }


def test_the_tables_have_one_line_per_row_and_no_stray_cell() -> None:
    rows = summary_rows({"p99_ms": 12.0, "p50_ms": 5.0, "p95_ms": 9.0})

    markdown = markdown_table(rows).splitlines()
    text = text_table(rows).splitlines()

    assert len(markdown) == len(rows) + 2 and len(text) == len(rows) + 2
    assert all(line.count("|") - line.count("\\|") == 5 for line in markdown)
    latency = (
        "| latency at 200 calls/s, p50 / p95 / p99 | 5.00 / 9.00 / 12.0 ms | p99 ≤ 15 ms | yes |"
    )
    assert latency in markdown
