"""infra.observability.tracing_resource: the process's resource, hashed once."""

from __future__ import annotations

import json
from typing import Any

import pytest
from opentelemetry.sdk import resources
from opentelemetry.sdk.resources import SERVICE_NAME, Resource

from infra.observability.tracing_resource import process_resource


def test_the_resource_is_the_sdk_s_and_hashed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
    resource = process_resource("ltm-worker")
    same = Resource(resource.attributes, resource.schema_url)
    assert resource == same
    assert hash(resource) == hash(same)

    serialized: list[Any] = []

    def counted(value: Any, **options: Any) -> str:
        serialized.append(value)
        return json.dumps(value, **options)

    monkeypatch.setattr(resources, "dumps", counted)
    fresh = process_resource("ltm-worker")
    # The exporter hashes the resource once per span it encodes.
    assert len({hash(fresh) for _ in range(100)}) == 1
    assert len(serialized) == 1
    assert fresh.attributes["deployment.environment"] == "test"


def test_the_service_is_named_unless_the_environment_names_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    assert process_resource("ltm-worker").attributes[SERVICE_NAME] == "ltm-worker"
    monkeypatch.setenv("OTEL_SERVICE_NAME", "worker-eu-1")
    assert process_resource("ltm-worker").attributes[SERVICE_NAME] == "worker-eu-1"
