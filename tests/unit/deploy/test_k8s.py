"""deploy/k8s: every manifest valid against its kind's schema, offline, and consistent with the
processes it runs: settings that exist, the worker's queue, the ports the processes open, the
shards each gateway group serves, each role's own secrets.

`make lint` runs this file. The built-in kinds are checked against the Kubernetes schemas that
the `kubernetes-validate` package bundles; KEDA's against its CRDs, vendored in
deploy/k8s/schemas (SOURCE says from where). Both strictly: a field the schema does not know is
an error, as the API server's strict field validation makes it.
"""

from __future__ import annotations

import copy
import re
import shlex
import subprocess
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from contracts import DEFAULT_PREFIX, Topology
from infra.settings import SECRET_SETTINGS, Settings, environment_variable
from ltm.commands import build_parser

ROOT = Path(__file__).resolve().parents[3]
K8S = ROOT / "deploy" / "k8s"
SCHEMAS = K8S / "schemas"
SECRETS_SCRIPT = K8S / "secrets.sh"
DOCKERFILE = ROOT / "deploy" / "docker" / "Dockerfile"
# The oldest Kubernetes the manifests are for, and the newest the package knows.
KUBERNETES_VERSIONS = ("1.30", kubernetes_validate.utils.latest_version())
KEDA_CRDS = {
    "ScaledObject": SCHEMAS / "keda.sh_scaledobjects.yaml",
    "TriggerAuthentication": SCHEMAS / "keda.sh_triggerauthentications.yaml",
}
# What KEDA's rabbitmq scaler reads from a trigger's metadata, and from its authentication
# (KEDA v2.20.2, pkg/scalers/rabbitmq_scaler.go): the schema leaves both maps free-form.
RABBITMQ_TRIGGER_METADATA = frozenset(
    {
        "queueName", "mode", "queueLength", "value", "activationValue", "host", "protocol",
        "vhostName", "useRegex", "excludeUnacknowledged", "pageSize", "operation", "timeout",
        "unsafeSsl",
    }
)  # fmt: skip
RABBITMQ_AUTH_PARAMETERS = frozenset(
    {
        "host", "protocol", "vhostName", "username", "password", "ca", "cert", "key",
        "keyPassword", "tls", "workloadIdentityResource",
    }
)  # fmt: skip
# Settings the manifests set before infra/settings.py has them: the replication factor comes
# with the broker-failover work. Once Settings has it, this changes nothing.
AWAITED_SETTINGS = frozenset({"LTM_AMQP_REPLICAS"})
# Each process's role: its ServiceAccount and the Secret it reads its URLs from.
ROLES = {
    "worker": ("ltm-worker", "ltm-worker"),
    "gateway": ("ltm-gateway", "ltm-gateway"),
    "migrate": ("ltm-migrate", "ltm-migrate"),
}
# The port setting each long-running process serves /healthz, /readyz and /metrics on.
PORT_SETTINGS = {"worker": "metrics_port", "gateway": "gateway_metrics_port"}


# -- reading the manifests ---------------------------------------------------------------------


def _kustomization() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((K8S / "kustomization.yaml").read_text("utf-8"))
    return loaded


@cache
def _resources() -> tuple[dict[str, Any], ...]:
    documents: list[dict[str, Any]] = []
    for name in _kustomization()["resources"]:
        text = (K8S / name).read_text(encoding="utf-8")
        documents.extend(document for document in yaml.safe_load_all(text) if document)
    return tuple(documents)


def _of_kind(kind: str) -> list[dict[str, Any]]:
    return [resource for resource in _resources() if resource["kind"] == kind]


def _named(kind: str, name: str) -> dict[str, Any]:
    [resource] = [item for item in _of_kind(kind) if item["metadata"]["name"] == name]
    return resource


def _config() -> dict[str, str]:
    data: dict[str, str] = _named("ConfigMap", "ltm-config")["data"]
    return data


def _pods() -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(workload, pod spec) of each Deployment and Job."""
    for resource in _resources():
        if resource["kind"] in ("Deployment", "Job"):
            yield resource, resource["spec"]["template"]["spec"]


def _containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod.get("initContainers", []), *pod["containers"]]


def _component(workload: dict[str, Any]) -> str:
    component: str = workload["metadata"]["labels"]["app.kubernetes.io/component"]
    return component


def _environment(container: dict[str, Any]) -> dict[str, str]:
    """What the container's process sees: the ConfigMaps it takes, then its own env."""
    environment: dict[str, str] = {}
    for source in container.get("envFrom", []):
        environment.update(_named("ConfigMap", source["configMapRef"]["name"])["data"])
    for variable in container.get("env", []):
        assert "valueFrom" not in variable, "secrets come as files, not variables"
        environment[variable["name"]] = variable["value"]
    return environment


def _expanded(arguments: list[str], environment: dict[str, str]) -> list[str]:
    """Kubernetes puts each $(VAR) of the container's environment into its arguments."""
    return [
        re.sub(r"\$\(([A-Z0-9_]+)\)", lambda match: environment[match.group(1)], argument)
        for argument in arguments
    ]


def _generated_secrets() -> dict[str, dict[str, str]]:
    """Each Secret of the secretGenerator: its keys and the file each comes from."""
    secrets = {}
    for generator in _kustomization()["secretGenerator"]:
        keys = dict(entry.split("=", 1) for entry in generator["files"])
        secrets[generator["name"]] = keys
    return secrets


def _setting_variables() -> frozenset[str]:
    names = set()
    for name, field in Settings.model_fields.items():
        variable = environment_variable(name, field)
        names.add(variable)
        if name in SECRET_SETTINGS:
            names.add(f"{variable}_FILE")
    return frozenset(names)


# -- schemas -------------------------------------------------------------------------------------


def _strict(schema: Any) -> Any:
    """A CRD's schema where an object refuses the fields it does not list."""
    if isinstance(schema, dict):
        schema = {key: _strict(value) for key, value in schema.items()}
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    return schema


@cache
def _crd_schema(kind: str, api_version: str) -> dict[str, Any]:
    crd = yaml.safe_load(KEDA_CRDS[kind].read_text(encoding="utf-8"))
    group, version = api_version.split("/")
    assert crd["spec"]["group"] == group and crd["spec"]["names"]["kind"] == kind
    [served] = [item for item in crd["spec"]["versions"] if item["name"] == version]
    assert served["served"], f"{api_version} {kind} is no longer served"
    schema: dict[str, Any] = _strict(served["schema"]["openAPIV3Schema"])
    return schema


def _schema_errors(resource: dict[str, Any]) -> list[str]:
    """Why the resource is not valid, for every Kubernetes version checked; [] when it is."""
    if resource["kind"] in KEDA_CRDS:
        validator = jsonschema.Draft7Validator(
            _crd_schema(resource["kind"], resource["apiVersion"])
        )
        return [
            f"{'.'.join(map(str, error.absolute_path))}: {error.message}"
            for error in validator.iter_errors(resource)
        ]
    errors = []
    for version in KUBERNETES_VERSIONS:
        try:
            kubernetes_validate.validate(resource, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            path = ".".join(map(str, error.path))
            errors.append(f"Kubernetes {version}: {path}: {error.message}")
    return errors


def _label(resource: dict[str, Any]) -> str:
    return f"{resource['kind']}/{resource['metadata']['name']}"


def test_the_kustomization_lists_every_manifest() -> None:
    listed = set(_kustomization()["resources"])
    manifests = {path.name for path in K8S.glob("*.yaml")}
    assert listed == manifests - {"kustomization.yaml", "kustomize-config.yaml"}
    assert _kustomization()["namespace"] == _named("Namespace", "tomori-ltm")["metadata"]["name"]


@pytest.mark.parametrize("resource", _resources(), ids=_label)
def test_each_manifest_is_valid_for_its_kind(resource: dict[str, Any]) -> None:
    assert _schema_errors(resource) == []


@pytest.mark.parametrize(
    ("kind", "name", "path"),
    [
        ("Deployment", "ltm-worker", ("spec", "template", "spec", "containers", 0)),
        ("ScaledObject", "ltm-worker", ("spec",)),
        ("TriggerAuthentication", "ltm-worker-broker", ("spec",)),
    ],
)
def test_the_validation_refuses_a_field_that_does_not_exist(
    kind: str, name: str, path: tuple[str | int, ...]
) -> None:
    resource = copy.deepcopy(_named(kind, name))
    place: Any = resource
    for step in path:
        place = place[step]
    place["replicaCount"] = 3  # a misspelling: no such field there
    assert any("replicaCount" in error for error in _schema_errors(resource))


def test_the_keda_schemas_say_where_they_come_from() -> None:
    source = (SCHEMAS / "SOURCE").read_text(encoding="utf-8")
    for path in KEDA_CRDS.values():
        assert path.name in source
    assert re.search(r"KEDA v\d+\.\d+\.\d+ \(tag v[\d.]+, commit [0-9a-f]{40}\)", source)


# -- the processes -----------------------------------------------------------------------------


def test_every_variable_the_manifests_set_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    known = _setting_variables() | AWAITED_SETTINGS
    for _, pod in _pods():
        for container in _containers(pod):
            assert set(_environment(container)) <= known, container["name"]
    # And the shared values are read as the settings they are meant to be.
    for variable, value in _config().items():
        monkeypatch.setenv(variable, value)
    settings = Settings()
    assert settings.amqp_prefix == DEFAULT_PREFIX
    assert settings.shard_count == int(_config()["LTM_SHARD_COUNT"])
    assert (settings.metrics_host, settings.log_format) == ("0.0.0.0", "json")


def test_every_container_runs_a_command_of_ltm() -> None:
    parser = build_parser()
    commands = set()
    for _, pod in _pods():
        for container in _containers(pod):
            arguments = _expanded(container["args"], _environment(container))
            commands.add(parser.parse_args(arguments).command)
            assert "command" not in container  # the image's entrypoint, `ltm`
    assert commands == {"worker", "gateway", "migrate", "topology"}


def test_the_processes_run_as_the_image_user_without_privileges() -> None:
    dockerfile = DOCKERFILE.read_text(encoding="utf-8")
    [uid] = re.findall(r"useradd .*--uid (\d+)", dockerfile)
    for workload, pod in _pods():
        context = pod["securityContext"]
        assert context["runAsNonRoot"] is True, _label(workload)
        assert context["runAsUser"] == int(uid), _label(workload)
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod["automountServiceAccountToken"] is False
        for container in _containers(pod):
            assert container["securityContext"] == {
                "allowPrivilegeEscalation": False,
                "readOnlyRootFilesystem": True,
                "capabilities": {"drop": ["ALL"]},
            }, container["name"]
            resources = container["resources"]
            assert {"cpu", "memory"} <= set(resources["requests"]), container["name"]
            assert "memory" in resources["limits"], container["name"]


def _mounted_files(pod: dict[str, Any], container: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Each file of a Secret the container sees: its path, and (Secret, key)."""
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    files = {}
    for mount in container["volumeMounts"]:
        secret = volumes[mount["name"]].get("secret")
        if secret is None:
            continue
        assert mount["readOnly"] is True
        for item in secret["items"]:
            files[f"{mount['mountPath']}/{item['path']}"] = (secret["secretName"], item["key"])
    return files


def test_secrets_are_files_of_the_roles_own_secret() -> None:
    generated = _generated_secrets()
    for workload, pod in _pods():
        account, own_secret = ROLES[_component(workload)]
        assert pod["serviceAccountName"] == account, _label(workload)
        for container in _containers(pod):
            environment = _environment(container)
            files = _mounted_files(pod, container)
            read = {value for key, value in environment.items() if key.endswith("_FILE")}
            # Every file it is told of is mounted, and nothing else is.
            assert read == set(files), container["name"]
            for secret, key in files.values():
                assert key in generated[secret], (secret, key)
            if container["name"] == "topology":  # declares the topology as the worker
                assert set(files.values()) == {("ltm-worker", "amqp-url")}
            else:
                assert {secret for secret, _ in files.values()} == {own_secret}
            assert "LTM_AMQP_URL" not in environment and "LTM_DATABASE_URL" not in environment


def test_each_role_has_its_service_account() -> None:
    accounts = {account["metadata"]["name"]: account for account in _of_kind("ServiceAccount")}
    assert set(accounts) == {account for account, _ in ROLES.values()}
    assert all(account["automountServiceAccountToken"] is False for account in accounts.values())
    # No process calls the Kubernetes API: nothing grants an account anything.
    assert not _of_kind("RoleBinding") and not _of_kind("ClusterRoleBinding")


@pytest.mark.parametrize("component", sorted(PORT_SETTINGS))
def test_probes_ask_the_endpoints_on_the_port_the_process_opens(component: str) -> None:
    workloads = [(workload, pod) for workload, pod in _pods() if _component(workload) == component]
    assert workloads
    for workload, pod in workloads:
        [container] = pod["containers"]
        environment = _environment(container)
        setting = PORT_SETTINGS[component]
        # The port it opens: its setting's, else the setting's default.
        opened = int(
            environment.get(f"LTM_{setting.upper()}", Settings.model_fields[setting].default)
        )
        assert environment["LTM_METRICS_HOST"] == "0.0.0.0"  # reachable from the kubelet
        ports = {item["name"]: item["containerPort"] for item in container["ports"]}
        probes = {
            kind: container[f"{kind}Probe"]["httpGet"]
            for kind in ("startup", "liveness", "readiness")
        }
        for kind, probe in probes.items():
            assert ports[probe["port"]] == opened, (_label(workload), kind)
        assert probes["liveness"]["path"] == "/healthz"
        assert probes["startup"]["path"] == "/healthz"
        assert probes["readiness"]["path"] == "/readyz"


def test_the_worker_drains_before_it_is_killed() -> None:
    worker = _named("Deployment", "ltm-worker")
    pod = worker["spec"]["template"]["spec"]
    grace = Settings.model_fields["shutdown_grace_s"].default
    assert pod["terminationGracePeriodSeconds"] > grace
    # Trusts the bots' and the operators' calls only.
    [container] = pod["containers"]
    assert _environment(container)["LTM_TRUSTED_PUBLISHERS"] == "ltm-bot,ltm-operator"


# -- autoscaling -------------------------------------------------------------------------------


def test_keda_scales_the_worker_on_the_depth_of_its_queue() -> None:
    scaled = _named("ScaledObject", "ltm-worker")["spec"]
    worker = _named("Deployment", "ltm-worker")
    assert scaled["scaleTargetRef"]["name"] == worker["metadata"]["name"]
    assert "replicas" not in worker["spec"]  # the autoscaler owns it
    assert 1 <= scaled["minReplicaCount"] < scaled["maxReplicaCount"]
    [trigger] = scaled["triggers"]
    assert trigger["type"] == "rabbitmq"
    metadata = trigger["metadata"]
    assert set(metadata) <= RABBITMQ_TRIGGER_METADATA
    assert metadata["mode"] == "QueueLength" and metadata["protocol"] == "amqp"
    assert metadata["queueName"] == Topology(_config()["LTM_AMQP_PREFIX"]).worker_queue
    assert metadata["queueName"] == Topology(DEFAULT_PREFIX).worker_queue
    assert float(metadata["value"]) > 0
    assert "host" not in metadata  # the URL holds a password: from the Secret only

    authentication = _named("TriggerAuthentication", trigger["authenticationRef"]["name"])
    [reference] = authentication["spec"]["secretTargetRef"]
    assert reference["parameter"] in RABBITMQ_AUTH_PARAMETERS
    assert reference["parameter"] == "host"
    assert reference["name"] == "ltm-worker"
    assert reference["key"] in _generated_secrets()["ltm-worker"]
    # kustomize renames a generated Secret where the TriggerAuthentication names it too.
    config = yaml.safe_load((K8S / "kustomize-config.yaml").read_text(encoding="utf-8"))
    assert {
        "kind": "TriggerAuthentication",
        "group": "keda.sh",
        "path": "spec/secretTargetRef/name",
    } in (config["nameReference"][0]["fieldSpecs"])


# -- gateways ----------------------------------------------------------------------------------


def _gateway_groups() -> dict[str, tuple[list[int], int]]:
    """Each gateway Deployment: the shards it serves and the shard count it is given."""
    parser = build_parser()
    groups = {}
    for workload, pod in _pods():
        if _component(workload) != "gateway":
            continue
        [container] = pod["containers"]
        arguments = parser.parse_args(_expanded(container["args"], _environment(container)))
        groups[workload["metadata"]["name"]] = (list(arguments.shards), arguments.shard_count)
        assert workload["spec"]["replicas"] == 1  # one process per group
        assert workload["spec"]["strategy"] == {"type": "Recreate"}
    return groups


def test_the_gateway_groups_cover_every_shard_once() -> None:
    groups = _gateway_groups()
    shard_count = int(_config()["LTM_SHARD_COUNT"])
    assert len(groups) >= 2
    served: list[int] = []
    for name, (shards, count) in groups.items():
        assert count == shard_count, name
        assert shards and all(0 <= shard < shard_count for shard in shards), name
        served.extend(shards)
    assert sorted(served) == list(range(shard_count))  # each shard once


# -- the secrets script ------------------------------------------------------------------------


def _run_secrets_script(folder: Path, **environment: str) -> dict[str, str]:
    command = f"sh {shlex.quote(str(SECRETS_SCRIPT))} {shlex.quote(str(folder))}"
    subprocess.run(
        ["sh", "-c", command],
        check=True,
        capture_output=True,
        env={"PATH": "/usr/bin:/bin", **environment},
    )
    return {path.name: path.read_text().strip() for path in folder.iterdir()}


def test_the_secrets_script_makes_every_file_the_generator_reads(tmp_path: Path) -> None:
    folder = tmp_path / "secrets"
    first = _run_secrets_script(folder)
    again = _run_secrets_script(folder)
    assert first == again  # the passwords are kept
    read = {Path(path).name for keys in _generated_secrets().values() for path in keys.values()}
    # The bot's Discord token is the deployer's to put there.
    assert read - set(first) == {"discord-token"}
    assert (folder.stat().st_mode & 0o777) == 0o700


def test_the_generator_reads_the_scripts_default_folder_named_after_it() -> None:
    # On a checkout where the script has not run, kustomize fails on the folder's path
    # ("lstat .../deploy/k8s/secrets.sh-output: no such file or directory"): it names the script.
    folders = {
        Path(path).parent.as_posix()
        for keys in _generated_secrets().values()
        for path in keys.values()
    }
    assert folders == {f"{SECRETS_SCRIPT.name}-output"}
    (folder,) = folders
    assert f"dir=${{1:-$here/{folder}}}\n" in SECRETS_SCRIPT.read_text(encoding="utf-8")
    ignored = (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    assert f"{K8S.relative_to(ROOT).as_posix()}/{folder}/" in ignored  # never committed


def test_the_urls_name_every_broker_node_and_both_database_hosts(tmp_path: Path) -> None:
    nodes = ("rmq-a.example:5672", "rmq-b.example:5672", "rmq-c.example:5672")
    made = _run_secrets_script(
        tmp_path / "secrets",
        LTM_K8S_BROKER_NODES=" ".join(nodes),
        LTM_K8S_BROKER_SERVICE="rmq.example:5672",
        LTM_K8S_DATABASE_HOSTS="pg-a.example:5432,pg-b.example:5432",
    )
    defaults = Settings()
    for file, user, password in (
        ("worker-amqp-url", defaults.broker_worker_user, "broker-worker-password"),
        ("bot-amqp-url", defaults.broker_bot_user, "broker-bot-password"),
    ):
        assert made[file] == ",".join(
            f"amqp://{user}:{made[password]}@{node}/{DEFAULT_PREFIX}" for node in nodes
        )
    # KEDA's one URL: the worker's account, on the Service any node answers.
    assert made["keda-amqp-url"] == (
        f"amqp://{defaults.broker_worker_user}:{made['broker-worker-password']}@rmq.example:5672/ltm"
    )
    for file, login, password in (
        ("worker-database-url", "ltm_worker_login", "db-worker-password"),
        ("gateway-database-url", "ltm_gateway_login", "db-gateway-password"),
        ("admin-database-url", "ltm_admin", "db-owner-password"),
    ):
        assert made[file] == (
            f"postgresql://{login}:{made[password]}@pg-a.example:5432,pg-b.example:5432/ltm"
            "?target_session_attrs=read-write"
        )
