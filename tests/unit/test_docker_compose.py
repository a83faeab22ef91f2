"""docker-compose.yml and the image: services, health checks, start order."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "infra" / "docker" / "Dockerfile"
LTM_SERVICES = ("migrate", "worker", "gateway")
OBSERVABILITY_SERVICES = ("prometheus", "grafana", "jaeger")


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    compose: dict[str, Any] = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    found: dict[str, Any] = compose["services"]
    return found


def _command(service: dict[str, Any]) -> str:
    parts = [*service.get("entrypoint", []), *service.get("command", [])]
    return " ".join(parts)


def test_the_services(services: dict[str, Any]) -> None:
    assert set(services) == {
        "rabbitmq",
        "postgres",
        "migrate",
        "worker",
        "gateway",
        *OBSERVABILITY_SERVICES,
    }
    assert services["rabbitmq"]["image"] == "rabbitmq:3.13-management"
    assert services["postgres"]["image"] == "postgres:15"
    for name in LTM_SERVICES:
        service = services[name]
        assert service["build"]["dockerfile"] == "infra/docker/Dockerfile", name
        environment = service["environment"]
        assert "@postgres:5432/" in environment["LTM_DATABASE_URL"], name
        assert "@rabbitmq:5672/" in environment["LTM_AMQP_URL"], name


def test_the_broker_and_database_have_health_checks(services: dict[str, Any]) -> None:
    assert services["rabbitmq"]["healthcheck"]["test"] == [
        "CMD",
        "rabbitmq-diagnostics",
        "-q",
        "ping",
    ]
    assert "pg_isready" in services["postgres"]["healthcheck"]["test"]


def test_migrate_runs_once_when_both_are_healthy(services: dict[str, Any]) -> None:
    migrate = services["migrate"]
    assert _command(migrate) == "sh -c ltm migrate && ltm topology"
    assert migrate["restart"] == "no"
    assert migrate["depends_on"] == {
        "rabbitmq": {"condition": "service_healthy"},
        "postgres": {"condition": "service_healthy"},
    }


@pytest.mark.parametrize("name", ["worker", "gateway"])
def test_the_processes_start_after_a_successful_migration(
    services: dict[str, Any], name: str
) -> None:
    depends_on = services[name]["depends_on"]
    assert depends_on["migrate"] == {"condition": "service_completed_successfully"}
    assert depends_on["rabbitmq"] == {"condition": "service_healthy"}


def test_the_worker_scales(services: dict[str, Any]) -> None:
    worker = services["worker"]
    assert worker["command"] == ["worker"]
    assert "container_name" not in worker
    assert "ports" not in worker  # a fixed host port would clash between replicas


@pytest.mark.parametrize(("name", "port"), [("worker", "9464"), ("gateway", "9465")])
def test_the_processes_serve_their_endpoints_to_other_containers(
    services: dict[str, Any], name: str, port: str
) -> None:
    # 127.0.0.1 by default: in a container, that would hide them from every scraper.
    assert services[name]["environment"]["LTM_METRICS_HOST"] == "0.0.0.0"
    assert services[name]["expose"] == [port]


def test_the_gateway_runs_in_console_mode(services: dict[str, Any]) -> None:
    gateway = services["gateway"]
    assert gateway["command"] == ["gateway", "--shards", "0", "--shard-count", "1"]
    assert "DISCORD_TOKEN" not in gateway["environment"]


class _Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/healthz" else 404)
        self.end_headers()
        self.wfile.write(b'{"status": "ok"}')

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def healthz_port() -> Iterator[int]:
    server = HTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


_PORT_SETTINGS = {"worker": "LTM_METRICS_PORT", "gateway": "LTM_GATEWAY_METRICS_PORT"}


def _run_healthcheck(services: dict[str, Any], name: str, port: int) -> int:
    test = services[name]["healthcheck"]["test"]
    assert test[:2] == ["CMD", "python"], "the image has python, not curl"
    command = [sys.executable, *test[2:]]
    env = {**os.environ, _PORT_SETTINGS[name]: str(port)}
    return subprocess.run(command, check=False, env=env, capture_output=True, timeout=30).returncode


@pytest.mark.parametrize("name", ["worker", "gateway"])
def test_the_health_check_asks_healthz(
    services: dict[str, Any], healthz_port: int, name: str
) -> None:
    assert _run_healthcheck(services, name, healthz_port) == 0


@pytest.mark.parametrize("name", ["worker", "gateway"])
def test_the_health_check_fails_without_an_answer(
    services: dict[str, Any], healthz_port: int, name: str
) -> None:
    closed = HTTPServer(("127.0.0.1", 0), _Health)
    free_port = closed.server_address[1]
    closed.server_close()
    assert _run_healthcheck(services, name, free_port) != 0


def test_the_image() -> None:
    dockerfile = DOCKERFILE.read_text(encoding="utf-8")
    assert "FROM python:3.11-slim" in dockerfile
    assert 'pip install ".[tracing]"' in dockerfile  # OTEL_* can turn tracing on
    user_lines = [line for line in dockerfile.splitlines() if line.startswith("USER ")]
    assert user_lines and user_lines[-1] not in ("USER root", "USER 0")
    assert 'ENTRYPOINT ["ltm"]' in dockerfile


def _mounts(service: dict[str, Any]) -> dict[str, Path]:
    """Where each of the service's files from this repository appears in its container."""
    mounts = {}
    for volume in service.get("volumes", []):
        source, target, *_ = volume.split(":")
        if source.startswith("./"):
            mounts[target] = ROOT / source
    return mounts


def test_observability_is_an_optional_profile(services: dict[str, Any]) -> None:
    for name, service in services.items():
        expected = ["observability"] if name in OBSERVABILITY_SERVICES else None
        assert service.get("profiles") == expected, name


def test_prometheus_scrapes_every_worker_and_gateway_with_the_alert_rules(
    services: dict[str, Any],
) -> None:
    mounts = _mounts(services["prometheus"])
    assert all(path.is_file() for path in mounts.values()), mounts
    config = yaml.safe_load(mounts["/etc/prometheus/prometheus.yml"].read_text(encoding="utf-8"))
    for rule_file in config["rule_files"]:  # relative to the configuration's folder
        assert mounts[f"/etc/prometheus/{rule_file}"] == ROOT / "infra/observability" / rule_file
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    for job, name in (("ltm-worker", "worker"), ("ltm-gateway", "gateway")):
        # Each replica of the service: the compose network's DNS names them all.
        [discovery] = jobs[job]["dns_sd_configs"]
        assert discovery["names"] == [name]
        assert [str(discovery["port"])] == services[name]["expose"]
    assert jobs["rabbitmq"]["static_configs"] == [{"targets": ["rabbitmq:15692"]}]


def test_grafana_is_provisioned_with_the_dashboard(services: dict[str, Any]) -> None:
    grafana = services["grafana"]
    mounts = _mounts(grafana)
    provisioning, dashboards = (
        mounts["/etc/grafana/provisioning"],
        mounts["/var/lib/grafana/dashboards"],
    )
    [source] = yaml.safe_load(
        (provisioning / "datasources" / "prometheus.yml").read_text(encoding="utf-8")
    )["datasources"]
    assert source["url"] == "http://prometheus:9090" and source["type"] == "prometheus"
    [provider] = yaml.safe_load(
        (provisioning / "dashboards" / "tomori-ltm.yml").read_text(encoding="utf-8")
    )["providers"]
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards"
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert (dashboards / Path(home).relative_to("/var/lib/grafana/dashboards")).is_file()


@pytest.mark.parametrize("name", LTM_SERVICES)
def test_the_processes_trace_to_jaeger_only_when_asked(services: dict[str, Any], name: str) -> None:
    environment = services[name]["environment"]
    # Off unless compose's environment sets OTEL_TRACES_EXPORTER (to otlp).
    assert environment["OTEL_TRACES_EXPORTER"] == "${OTEL_TRACES_EXPORTER:-none}"
    assert environment["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://jaeger:4318"
    assert "4318" in services["jaeger"]["expose"]


def _compose_command() -> list[str] | None:
    docker = shutil.which("docker")
    if docker is not None:
        probe = subprocess.run(
            [docker, "compose", "version"], check=False, capture_output=True, text=True, timeout=30
        )
        if probe.returncode == 0:
            return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    return [legacy] if legacy is not None else None


def test_compose_accepts_the_file() -> None:
    compose = _compose_command()
    if compose is None:
        pytest.skip("neither `docker compose` nor `docker-compose` is installed")
    result = subprocess.run(
        [*compose, "-f", str(COMPOSE_FILE), "--profile", "observability", "config", "-q"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
