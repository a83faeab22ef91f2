"""Real messages checked against `contracts/asyncapi.yaml`: their payloads and headers, by the
JSON Schemas of the document (JSON Schema 2020-12, with formats)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import jsonschema
import orjson
import yaml
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

__all__ = ["DOCUMENT", "AsyncApiDocument"]

DOCUMENT = Path(__file__).resolve().parents[2] / "contracts" / "asyncapi.yaml"
_BASE = "urn:ltm:asyncapi"


@dataclass(frozen=True)
class AsyncApiDocument:
    document: dict[str, Any]

    @classmethod
    def load(cls, path: Path = DOCUMENT) -> AsyncApiDocument:
        return cls(yaml.safe_load(path.read_text(encoding="utf-8")))

    @cached_property
    def _registry(self) -> Registry[Any]:
        resource: Resource[Any] = Resource.from_contents(
            self.document, default_specification=DRAFT202012
        )
        registry: Registry[Any] = Registry().with_resource(_BASE, resource)
        return registry

    def _validator(self, pointer: str) -> jsonschema.Draft202012Validator:
        return jsonschema.Draft202012Validator(
            {"$ref": f"{_BASE}#{pointer}"},
            registry=self._registry,
            format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER,
        )

    def message_name(self, event_type: str) -> str:
        """The document's message for an AMQP `type` (an event type)."""
        for name, message in self.document["components"]["messages"].items():
            if message["name"] == event_type:
                return str(name)
        raise KeyError(f"no message of type {event_type!r} in the document")

    def errors(self, message: str, body: bytes, headers: dict[str, Any]) -> list[str]:
        """Why `body` and `headers` are not a valid `message`; empty when they are."""
        found = []
        base = f"/components/messages/{message}"
        payload = orjson.loads(body)
        for error in self._validator(f"{base}/payload").iter_errors(payload):
            found.append(f"payload {'/'.join(map(str, error.absolute_path))}: {error.message}")
        for error in self._validator(f"{base}/headers").iter_errors(headers):
            found.append(f"headers {'/'.join(map(str, error.absolute_path))}: {error.message}")
        return found
