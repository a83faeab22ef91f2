"""`bench.cluster`: what a worker on the cluster is told, and the phase's figures."""

from __future__ import annotations

from bench.cluster import (
    cluster_figures,
    cluster_latency_figures,
    cluster_rows,
    cluster_worker_env,
)
from infra.settings import Settings

URLS = ["amqp://guest:guest@127.0.0.1:5001/", "amqp://guest:guest@127.0.0.1:5002/"]


def test_the_worker_is_told_every_node_and_three_replicas_as_its_settings_read_them() -> None:
    env = cluster_worker_env([*URLS, "amqp://guest:guest@127.0.0.1:5003/"])

    settings = Settings(amqp_url=env["LTM_AMQP_URL"], amqp_replicas=int(env["LTM_AMQP_REPLICAS"]))

    assert len(settings.amqp_urls) == 3
    assert settings.topology.replicas == 3


ROUNDS = [
    {"cluster": {"tps": 300.0}, "single_node": {"tps": 600.0}, "ratio": 0.5},
    {"cluster": {"tps": 280.0}, "single_node": {"tps": 700.0}, "ratio": 0.4},
    {"cluster": {"tps": 330.0}, "single_node": {"tps": 550.0}, "ratio": 0.6},
]
LATENCIES = {"cluster": {"p99_ms": 31.456}, "single_node": {"p99_ms": 9.87}}


def test_the_figures_are_the_rounds_medians_and_the_ratio_is_taken_within_each_round() -> None:
    figures = cluster_figures(ROUNDS, LATENCIES)

    assert figures == {
        "cluster_tps": 300.0,
        "single_node_tps": 600.0,
        "cluster_ratio": 0.5,
        "cluster_p99_ms": 31.46,
        "single_node_p99_ms": 9.87,
    }


def test_the_rows_are_figure_and_measured_only_the_ratio_without_a_target() -> None:
    rows = cluster_rows(cluster_figures(ROUNDS, LATENCIES))

    assert rows[0] == ("single node | 3-node cluster: throughput", "600.0 | 300.0 /s")
    assert rows[1][1] == "9.9 | 31.5 ms"
    assert rows[2] == ("cluster_ratio (3 replicas, one machine)", "0.50")
    assert all(len(row) == 2 for row in rows)


def test_a_run_without_the_phase_shows_dashes() -> None:
    rows = cluster_rows({})

    assert rows[0][1] == "- | - /s"
    assert rows[2] == ("cluster_ratio (3 replicas, one machine)", "-")


def test_the_tail_at_the_targets_rate_is_named_by_the_rate() -> None:
    figures = cluster_latency_figures(LATENCIES, 100.0)

    assert figures == {"cluster_p99_ms_at_100": 31.46, "single_node_p99_ms_at_100": 9.87}
    assert cluster_rows(figures)[3][1] == "9.9 | 31.5 ms"
