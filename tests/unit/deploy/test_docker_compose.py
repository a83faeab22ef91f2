"""docker-compose.yml and the image: services, health checks, start order."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "deploy" / "docker" / "Dockerfile"
LTM_SERVICES = ("broker-definitions", "migrate", "worker", "gateway", "operator")
SECRETS_SCRIPT = ROOT / "deploy" / "docker" / "secrets.sh"
# Each part's broker account and database role, as Docker secrets of URLs.
ROLE_SECRETS = {
    "worker": ("worker-amqp-url", "worker-database-url"),
    "gateway": ("bot-amqp-url", "gateway-database-url"),
    "operator": ("operator-amqp-url", "operator-database-url"),
}
OBSERVABILITY_SERVICES = ("prometheus", "grafana", "jaeger")
# The profile `cluster`: three broker nodes, a primary and its synchronous standby, and the
# service's own processes on them.
BROKER_NODES = ("rabbitmq-1", "rabbitmq-2", "rabbitmq-3")
DATABASE_HOSTS = ("postgres-primary", "postgres-standby")
CLUSTER_LTM_SERVICES = (
    "cluster-broker-definitions",
    "cluster-migrate",
    "cluster-worker",
    "cluster-gateway",
    "cluster-operator",
)
CLUSTER_SERVICES = (*BROKER_NODES, *DATABASE_HOSTS, *CLUSTER_LTM_SERVICES)
# Each cluster process's role: its broker user and database login, as URLs in secrets.
CLUSTER_ROLES = {
    "cluster-worker": ("ltm-worker", "ltm_worker_login"),
    "cluster-gateway": ("ltm-bot", "ltm_gateway_login"),
    "cluster-operator": ("ltm-operator", "ltm_operator_login"),
}


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
        *LTM_SERVICES,
        *OBSERVABILITY_SERVICES,
        *CLUSTER_SERVICES,
    }
    assert services["rabbitmq"]["image"] == "rabbitmq:3.13-management"
    assert services["postgres"]["image"] == "postgres:15"
    for name in BROKER_NODES:
        assert services[name]["image"] == services["rabbitmq"]["image"], name
    for name in DATABASE_HOSTS:
        assert services[name]["image"] == services["postgres"]["image"], name
    for name in (*LTM_SERVICES, *CLUSTER_LTM_SERVICES):
        assert services[name]["build"]["dockerfile"] == "deploy/docker/Dockerfile", name


@pytest.mark.parametrize("name", sorted(ROLE_SECRETS))
def test_each_part_connects_as_its_role_with_secrets(services: dict[str, Any], name: str) -> None:
    service = services[name]
    amqp, database = ROLE_SECRETS[name]
    environment = service["environment"]
    assert environment["LTM_AMQP_URL_FILE"] == f"/run/secrets/{amqp}"
    assert environment["LTM_DATABASE_URL_FILE"] == f"/run/secrets/{database}"
    assert "LTM_AMQP_URL" not in environment and "LTM_DATABASE_URL" not in environment
    assert sorted(service["secrets"]) == sorted(ROLE_SECRETS[name])


def test_the_image_holds_every_package_the_project_installs() -> None:
    # `pip install` in the image finds only the folders copied in: a missing one breaks `ltm`.
    dockerfile = DOCKERFILE.read_text(encoding="utf-8")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = tomllib.loads((ROOT / "contracts" / "pyproject.toml").read_text(encoding="utf-8"))
    included = project["tool"]["setuptools"]["packages"]["find"]["include"]
    copied = set(re.findall(r"^COPY (\w+) \./\1$", dockerfile, re.MULTILINE))

    assert {pattern.rstrip("*") for pattern in included} | {"contracts"} <= copied
    # The service's dependency on the contracts resolves to the folder installed with it.
    pinned = f"{contracts['project']['name']}=={contracts['project']['version']}"
    assert pinned in project["project"]["dependencies"]
    (installed,) = re.findall(r"^RUN pip install (.+?) &&", dockerfile, re.MULTILINE)
    assert installed.split() == ["./contracts", '".[tracing]"']
    # Both builds read the licence file their metadata names (contracts/LICENSE links to it).
    (files,) = re.findall(r"^COPY (pyproject\.toml .*) \./$", dockerfile, re.MULTILINE)
    assert "LICENSE" in files.split()


def test_no_password_is_written_in_the_file() -> None:
    text = COMPOSE_FILE.read_text(encoding="utf-8")
    assert re.search(r"://[^/\s:@]+:[^/\s@]+@", text) is None
    assert "PASSWORD:" not in text  # only PASSWORD_FILE settings


def test_the_broker_boots_with_the_definitions_of_ltm(services: dict[str, Any]) -> None:
    definitions = services["broker-definitions"]
    assert _command(definitions) == (
        "sh -c ltm broker-definitions --vhost ltm > /home/ltm/definitions/definitions.json"
    )
    for role in ("WORKER", "BOT", "OPERATOR"):
        variable = f"LTM_BROKER_{role}_PASSWORD_FILE"
        secret = f"broker-{role.lower()}-password"
        assert definitions["environment"][variable] == f"/run/secrets/{secret}"
        assert secret in definitions["secrets"]
    rabbitmq = services["rabbitmq"]
    assert rabbitmq["depends_on"] == {
        "broker-definitions": {"condition": "service_completed_successfully"}
    }
    assert "rabbitmq-definitions:/etc/rabbitmq/definitions:ro" in rabbitmq["volumes"]
    config = ROOT / "deploy" / "docker" / "rabbitmq.conf"
    assert (
        f"./{config.relative_to(ROOT)}:/etc/rabbitmq/conf.d/20-ltm.conf:ro" in (rabbitmq["volumes"])
    )
    assert "load_definitions = /etc/rabbitmq/definitions/definitions.json" in config.read_text()
    assert "RABBITMQ_DEFAULT_PASS" not in rabbitmq.get("environment", {})


def test_the_worker_takes_calls_of_the_bots_and_the_operators_only(
    services: dict[str, Any],
) -> None:
    assert services["worker"]["environment"]["LTM_TRUSTED_PUBLISHERS"] == "ltm-bot,ltm-operator"


def test_postgres_makes_a_login_role_per_part(services: dict[str, Any]) -> None:
    postgres = services["postgres"]
    assert postgres["environment"]["POSTGRES_PASSWORD_FILE"] == "/run/secrets/postgres-password"
    assert (
        "./deploy/docker/postgres-logins.sh:/docker-entrypoint-initdb.d/10-ltm-logins.sh:ro"
        in postgres["volumes"]
    )
    assert sorted(postgres["secrets"]) == sorted(
        ["postgres-password", "db-worker-password", "db-gateway-password", "db-operator-password"]
    )


def test_the_secrets_script_makes_every_secret_the_file_names(tmp_path: Path) -> None:
    compose: dict[str, Any] = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    folder = tmp_path / "secrets"
    for _ in range(2):  # a second run keeps the passwords
        subprocess.run(["sh", str(SECRETS_SCRIPT), str(folder)], check=True, capture_output=True)
    made = {path.name: path.read_text().strip() for path in folder.iterdir()}
    named = {Path(secret["file"]).name for secret in compose["secrets"].values()}
    assert set(made) == named
    assert all(made.values())
    assert made["worker-amqp-url"] == (
        f"amqp://ltm-worker:{made['broker-worker-password']}@rabbitmq:5672/ltm"
    )
    assert made["gateway-database-url"] == (
        f"postgresql://ltm_gateway_login:{made['db-gateway-password']}@postgres:5432/ltm"
    )
    assert (folder.stat().st_mode & 0o777) == 0o700


def test_the_broker_and_database_have_health_checks(services: dict[str, Any]) -> None:
    assert services["rabbitmq"]["healthcheck"]["test"] == [
        "CMD",
        "rabbitmq-diagnostics",
        "-q",
        "ping",
    ]
    assert "pg_isready" in services["postgres"]["healthcheck"]["test"]


def test_migrate_runs_once_and_grants_the_roles(services: dict[str, Any]) -> None:
    migrate = services["migrate"]
    assert migrate["command"] == ["migrate", "--roles"]
    assert migrate["environment"]["LTM_DATABASE_URL_FILE"] == "/run/secrets/admin-database-url"
    assert migrate["restart"] == "no"
    assert migrate["depends_on"] == {"postgres": {"condition": "service_healthy"}}


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
    assert 'pip install ./contracts ".[tracing]"' in dockerfile  # OTEL_* can turn tracing on
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
        if name in OBSERVABILITY_SERVICES:
            assert service.get("profiles") == ["observability"], name
        else:
            assert "observability" not in (service.get("profiles") or []), name


def test_prometheus_scrapes_every_worker_and_gateway_with_the_alert_rules(
    services: dict[str, Any],
) -> None:
    mounts = _mounts(services["prometheus"])
    assert all(path.is_file() for path in mounts.values()), mounts
    config = yaml.safe_load(mounts["/etc/prometheus/prometheus.yml"].read_text(encoding="utf-8"))
    for rule_file in config["rule_files"]:  # relative to the configuration's folder
        assert mounts[f"/etc/prometheus/{rule_file}"] == ROOT / "deploy/observability" / rule_file
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


@pytest.mark.parametrize("profile", ["observability", "cluster"])
def test_compose_accepts_the_file(profile: str) -> None:
    compose = _compose_command()
    if compose is None:
        pytest.skip("neither `docker compose` nor `docker-compose` is installed")
    result = subprocess.run(
        [*compose, "-f", str(COMPOSE_FILE), "--profile", profile, "config", "-q"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr


# -- profile `cluster` ------------------------------------------------------------------------


def _conf(path: Path) -> dict[str, str]:
    """A rabbitmq.conf's settings (key = value lines)."""
    settings = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            settings[key.strip()] = value.strip()
    return settings


@pytest.fixture(scope="module")
def cluster_secrets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("cluster") / "secrets"
    subprocess.run(["sh", str(SECRETS_SCRIPT), str(folder)], check=True, capture_output=True)
    return {path.name: path.read_text().strip() for path in folder.iterdir()}


def _secret_of(service: dict[str, Any], variable: str) -> str:
    path = service["environment"][variable]
    name = Path(path).name
    assert path == f"/run/secrets/{name}" and name in service["secrets"], variable
    return name


def test_the_cluster_is_an_optional_profile(services: dict[str, Any]) -> None:
    for name, service in services.items():
        if name in CLUSTER_SERVICES:
            assert service.get("profiles") == ["cluster"], name
        else:
            assert "cluster" not in (service.get("profiles") or []), name


def test_the_broker_nodes_form_one_cluster(services: dict[str, Any]) -> None:
    mounts = [_mounts(services[name]) for name in BROKER_NODES]
    config = mounts[0]["/etc/rabbitmq/conf.d/30-ltm-cluster.conf"]
    settings = _conf(config)
    assert settings["cluster_formation.peer_discovery_backend"] == "classic_config"
    listed = {
        value for key, value in settings.items() if key.startswith("cluster_formation.classic_")
    }
    # A node is rabbit@<its hostname>: the list names each node of the file, once.
    assert listed == {f"rabbit@{services[name]['hostname']}" for name in BROKER_NODES}
    assert {services[name]["hostname"] for name in BROKER_NODES} == set(BROKER_NODES)
    # Leaders spread over the nodes; every quorum queue gets to 3 members.
    assert settings["queue_leader_locator"] == "balanced"
    assert settings["quorum_queue.continuous_membership_reconciliation.enabled"] == "true"
    assert settings["quorum_queue.continuous_membership_reconciliation.target_group_size"] == "3"
    for name, node_mounts in zip(BROKER_NODES, mounts, strict=True):
        node = services[name]
        assert node_mounts == mounts[0], name  # the same files on each node
        assert all(path.is_file() for path in node_mounts.values()), name
        assert f"{name}-data:/var/lib/rabbitmq" in node["volumes"]
        assert "rabbitmq-cluster-definitions:/etc/rabbitmq/definitions:ro" in node["volumes"]
        assert node["healthcheck"]["test"] == services["rabbitmq"]["healthcheck"]["test"]
        assert node["depends_on"] == {
            "cluster-broker-definitions": {"condition": "service_completed_successfully"}
        }


def test_the_broker_nodes_share_the_erlang_cookie_from_a_secret(
    services: dict[str, Any],
) -> None:
    for name in BROKER_NODES:
        node = services[name]
        assert node["secrets"] == ["erlang-cookie"], name
        [script_path] = node["entrypoint"][1:]
        script = _mounts(node)[script_path].read_text(encoding="utf-8")
        # Copied where Erlang reads it, readable by the node's user alone.
        assert "/run/secrets/erlang-cookie" in script
        assert "install -m 400 -o rabbitmq -g rabbitmq" in script
        assert "/var/lib/rabbitmq/.erlang.cookie" in script
        assert script.rstrip().endswith("exec docker-entrypoint.sh rabbitmq-server")
        assert "RABBITMQ_ERLANG_COOKIE" not in node.get("environment", {})


def test_the_cluster_definitions_declare_every_queue_on_three_nodes(
    services: dict[str, Any],
) -> None:
    definitions = services["cluster-broker-definitions"]
    assert _command(definitions) == _command(services["broker-definitions"])
    assert definitions["environment"]["LTM_AMQP_REPLICAS"] == "3"
    assert definitions["volumes"] == ["rabbitmq-cluster-definitions:/home/ltm/definitions"]


def test_the_database_has_a_synchronous_standby(services: dict[str, Any]) -> None:
    primary, standby = (services[name] for name in DATABASE_HOSTS)
    primary_mounts = _mounts(primary)
    assert primary_mounts["/docker-entrypoint-initdb.d/10-ltm-logins.sh"] == (
        ROOT / "deploy/docker/postgres-logins.sh"
    )
    replication = primary_mounts["/docker-entrypoint-initdb.d/20-ltm-replication.sh"]
    replication_script = replication.read_text(encoding="utf-8")
    assert "ALTER SYSTEM SET synchronous_standby_names = 'FIRST 1 (ltm_standby)'" in (
        replication_script
    )
    assert "host replication ltm_replicator all scram-sha-256" in replication_script
    assert "db-replication-password" in primary["secrets"]

    [script_path] = standby["entrypoint"][1:]
    standby_script = _mounts(standby)[script_path].read_text(encoding="utf-8")
    # The copy writes the connection it streams from, named as the primary waits for it.
    assert "pg_basebackup" in standby_script and "--write-recovery-conf" in standby_script
    assert "user=ltm_replicator application_name=ltm_standby" in standby_script
    assert standby["environment"]["LTM_PRIMARY_HOST"] == "postgres-primary"
    assert standby["secrets"] == ["db-replication-password"]
    assert standby["depends_on"] == {"postgres-primary": {"condition": "service_healthy"}}
    assert "pg_is_in_recovery()" in " ".join(standby["healthcheck"]["test"])
    assert primary["healthcheck"]["test"] == services["postgres"]["healthcheck"]["test"]


@pytest.mark.parametrize("name", CLUSTER_LTM_SERVICES)
def test_every_cluster_process_replicates_queues_on_three_nodes(
    services: dict[str, Any], name: str
) -> None:
    environment = services[name]["environment"]
    assert environment["LTM_AMQP_REPLICAS"] == "3"
    assert environment["LTM_AMQP_PREFIX"] == services["worker"]["environment"]["LTM_AMQP_PREFIX"]


@pytest.mark.parametrize("name", sorted(CLUSTER_ROLES))
def test_every_cluster_process_names_all_three_nodes_and_both_database_hosts(
    services: dict[str, Any], cluster_secrets: dict[str, str], name: str
) -> None:
    service = services[name]
    broker_user, database_login = CLUSTER_ROLES[name]
    amqp_url = cluster_secrets[_secret_of(service, "LTM_AMQP_URL_FILE")]
    database_url = cluster_secrets[_secret_of(service, "LTM_DATABASE_URL_FILE")]
    node_urls = amqp_url.split(",")
    assert [re.sub(r"^amqp://[^@]+@", "", url) for url in node_urls] == [
        f"{node}:5672/ltm" for node in BROKER_NODES
    ]
    assert all(url.startswith(f"amqp://{broker_user}:") for url in node_urls)
    assert re.fullmatch(
        rf"postgresql://{database_login}:[A-Za-z0-9]+@postgres-primary:5432,"
        r"postgres-standby:5432/ltm\?target_session_attrs=read-write",
        database_url,
    )
    assert len(service["secrets"]) == 2  # its own role's URLs, nothing else


@pytest.mark.parametrize("name", ["cluster-worker", "cluster-gateway", "cluster-operator"])
def test_cluster_processes_start_once_every_node_is_healthy(
    services: dict[str, Any], name: str
) -> None:
    depends_on = services[name]["depends_on"]
    for node in BROKER_NODES:
        assert depends_on[node] == {"condition": "service_healthy"}, node
    if name != "cluster-operator":
        assert depends_on["cluster-migrate"] == {"condition": "service_completed_successfully"}


def test_the_cluster_migrates_once_the_standby_streams(
    services: dict[str, Any], cluster_secrets: dict[str, str]
) -> None:
    migrate = services["cluster-migrate"]
    assert migrate["command"] == ["migrate", "--roles"]
    # Every commit on the primary waits for the standby: without it, the migration would hang.
    assert migrate["depends_on"] == {
        name: {"condition": "service_healthy"} for name in DATABASE_HOSTS
    }
    admin_url = cluster_secrets[_secret_of(migrate, "LTM_DATABASE_URL_FILE")]
    assert admin_url.startswith("postgresql://ltm_admin:")
    assert "postgres-primary:5432,postgres-standby:5432" in admin_url


@pytest.mark.parametrize("name", ["worker", "gateway"])
def test_the_cluster_processes_run_and_check_as_the_single_node_ones(
    services: dict[str, Any], name: str
) -> None:
    single, clustered = services[name], services[f"cluster-{name}"]
    for key in ("command", "expose", "healthcheck"):
        assert clustered[key] == single[key], key
    assert clustered["environment"]["LTM_METRICS_HOST"] == "0.0.0.0"
    if name == "worker":
        assert clustered["environment"]["LTM_TRUSTED_PUBLISHERS"] == "ltm-bot,ltm-operator"
        assert clustered["stop_grace_period"] == single["stop_grace_period"]


def test_the_erlang_cookie_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    folder = tmp_path / "secrets"
    subprocess.run(["sh", str(SECRETS_SCRIPT), str(folder)], check=True, capture_output=True)
    cookie = folder / "erlang-cookie"
    assert re.fullmatch(r"[A-Za-z0-9]{32}\n?", cookie.read_text())
    assert (cookie.stat().st_mode & 0o777) == 0o600
    assert ((folder / "cluster-worker-amqp-url").stat().st_mode & 0o777) == 0o644
