"""docs/contract.md as an AsyncAPI 3.0 document: every channel, message and operation.

Schemas come from the pydantic models, so the document cannot drift from the code;
`make asyncapi` writes it to `contracts/asyncapi.yaml`, and a test fails when the committed
file differs. PyYAML is imported only to render: bot shards import `contracts` with pydantic
alone.
"""

from __future__ import annotations

import sys
from typing import Any, Final

from contracts.asyncapi_channels import channels
from contracts.asyncapi_messages import messages, schemas
from contracts.asyncapi_operations import operations
from contracts.codec import CONTENT_TYPE, MAX_NESTING
from contracts.envelope import SCHEMA_VERSION
from contracts.topology import DEFAULT_PREFIX, Topology

__all__ = ["ASYNCAPI_VERSION", "build_document", "main", "render_yaml"]

ASYNCAPI_VERSION: Final = "3.0.0"
DOCUMENT_VERSION: Final = f"{SCHEMA_VERSION}.0.0"


def build_document(prefix: str = DEFAULT_PREFIX) -> dict[str, Any]:
    """The AsyncAPI document as plain data, names under `prefix`."""
    topology = Topology(prefix)
    return {
        "asyncapi": ASYNCAPI_VERSION,
        "info": _info(),
        "defaultContentType": CONTENT_TYPE,
        "servers": {
            "broker": {
                "host": "localhost:5672",
                "protocol": "amqp",
                "protocolVersion": "0.9.1",
                "description": "RabbitMQ (LTM_AMQP_URL); quorum and stream queues need 3.9+.",
            }
        },
        "channels": channels(topology),
        "operations": operations(),
        "components": {"messages": messages(), "schemas": schemas()},
    }


def render_yaml(prefix: str = DEFAULT_PREFIX) -> str:
    import yaml

    class _Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True  # shared sub-objects written out in full: no &id001 anchors

    # Long descriptions stay readable; key order stays as built.
    _Dumper.add_representer(str, _represent_text)
    rendered: str = yaml.dump(
        build_document(prefix),
        Dumper=_Dumper,
        sort_keys=False,
        allow_unicode=True,
        width=100,
    )
    return rendered


def main() -> int:
    sys.stdout.write(render_yaml())
    return 0


def _represent_text(dumper: Any, text: str) -> Any:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


def _info() -> dict[str, Any]:
    return {
        "title": "Long-term-memory update service",
        "version": DOCUMENT_VERSION,
        "description": (
            "Messages between bot shards, the worker, gateway processes and operators' tools.\n"
            f"Names are shown under the default prefix `{DEFAULT_PREFIX}` (setting "
            "LTM_AMQP_PREFIX).\n"
            "Every message is persistent (delivery_mode 2), UTF-8 JSON (content_type "
            f"{CONTENT_TYPE}), and carries the AMQP properties message_id = event_id, "
            "correlation_id = tool_call_id where there is one, type = event_type, timestamp, "
            f"and the header schema_version ({SCHEMA_VERSION}).\n"
            "Consumers deduplicate on event_id. Ids of Discord objects are strings of digits.\n"
            "A tool call's body holds at most LTM_MAX_MESSAGE_BYTES (262144 by default) and "
            f"nests at most {MAX_NESTING} levels; the worker dead-letters one that does not, "
            "unparsed.\n"
        ),
    }


if __name__ == "__main__":
    sys.exit(main())
