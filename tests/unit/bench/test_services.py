"""`bench.services`: the environment of the bench's child processes."""

from __future__ import annotations

import pytest

from bench.services import BenchServices

SERVICES = BenchServices(
    run_id="r1",
    database_url="postgresql://localhost/ltm_bench_r1",
    amqp_url="amqp://guest:guest@localhost/ltm-bench-r1",
    amqp_prefix="ltmbr1",
    vhost="ltm-bench-r1",
)


def test_no_tracing_setting_of_the_shell_reaches_a_child(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_on")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")

    env = SERVICES.env()

    assert not [name for name in env if name.startswith("OTEL_")]
    assert env["LTM_AMQP_PREFIX"] == "ltmbr1"


def test_a_phase_still_sets_the_tracing_it_measures(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_on")

    env = SERVICES.env(OTEL_TRACES_SAMPLER="parentbased_always_on", LTM_METRICS_PORT="9")

    assert env["OTEL_TRACES_SAMPLER"] == "parentbased_always_on"
    assert env["LTM_METRICS_PORT"] == "9"
