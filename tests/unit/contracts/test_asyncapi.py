"""The committed AsyncAPI document is the generated one, and it covers the whole contract."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

import contracts
from contracts import (
    DATA_REQUEST_ROUTING_KEY,
    EVENT_TYPES,
    Topology,
    audit_routing_key,
    audit_stream_arguments,
    cache_routing_key,
    dead_letter_queue_arguments,
    embed_routing_key,
    result_routing_key,
    retract_routing_key,
    shard_queue_arguments,
    subject_routing_key,
    worker_queue_arguments,
)
from contracts.asyncapi import build_document, render_yaml

COMMITTED = Path(contracts.__file__).with_name("asyncapi.yaml")


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(render_yaml())
    return loaded


def test_the_committed_document_is_up_to_date() -> None:
    assert COMMITTED.exists(), "contracts/asyncapi.yaml is missing: run `make asyncapi`"
    assert COMMITTED.read_text(encoding="utf-8") == render_yaml(), (
        "contracts/asyncapi.yaml differs from what the models generate: run `make asyncapi` "
        "and commit the result"
    )


def test_the_yaml_is_the_document(document: dict[str, Any]) -> None:
    assert document == build_document()
    assert document["asyncapi"] == "3.0.0"


def test_every_event_type_is_a_message(document: dict[str, Any]) -> None:
    messages = document["components"]["messages"]
    names = {message["name"] for message in messages.values()}
    assert set(EVENT_TYPES) <= names
    for event_type, model in EVENT_TYPES.items():
        (message,) = (m for m in messages.values() if m["name"] == event_type)
        payload = _resolve(document, message["payload"]["$ref"])
        assert set(payload["properties"]) == set(model.model_fields)
        assert message["bindings"]["amqp"]["messageType"] == event_type
        version = 2 if event_type.startswith("memory.") else 1
        assert message["headers"]["properties"]["schema_version"]["const"] == version
        assert payload["properties"]["schema_version"]["const"] == version


def test_every_name_of_the_topology_is_a_channel_or_its_exchange(
    document: dict[str, Any],
) -> None:
    topology = Topology()
    queues = {
        channel["bindings"]["amqp"]["queue"]["name"]
        for channel in document["channels"].values()
        if channel["bindings"]["amqp"]["is"] == "queue"
    }
    exchanges = {
        channel["bindings"]["amqp"]["exchange"]["name"]
        for channel in document["channels"].values()
        if channel["bindings"]["amqp"]["is"] == "routingKey"
    }
    assert queues == {
        topology.worker_queue,
        topology.dead_letter_queue,
        topology.audit_stream,
        topology.shard_queue(0).replace(".0", ".{shardId}"),
        topology.cache_queue("{instance}"),
    }
    assert exchanges == {
        topology.tool_calls_exchange,
        topology.dead_letter_exchange,
        topology.events_exchange,
    }


def test_routing_keys_match_the_contract_helpers(document: dict[str, Any]) -> None:
    channels = document["channels"]
    assert channels["toolCallCompleted"]["address"].format(shardId=3) == result_routing_key(3)
    assert channels["embedRequested"]["address"].format(shardId=3) == embed_routing_key(3)
    assert channels["cacheInvalidate"]["address"].format(
        cache="user", key="42"
    ) == cache_routing_key("user", "42")
    assert channels["toolCallRequested"]["address"] == "{toolName}"
    assert channels["toolCallRequested"]["parameters"]["toolName"]["enum"] == [
        "update_long_term_memory",
        "create_long_term_memory",
        "remember_this_fact",
    ]
    assert channels["memoryChanged"]["address"].format(
        action="created", scope="target_user"
    ) == audit_routing_key("created", "target_user")
    assert channels["dataRequestRequested"]["address"] == DATA_REQUEST_ROUTING_KEY
    assert channels["noticeRetract"]["address"].format(shardId=3) == retract_routing_key(3)
    assert channels["subjectChanged"]["address"].format(
        action="erased", subjectKind="guild"
    ) == subject_routing_key("erased", "guild")


def test_the_audit_stream_keeps_changes_operators_acts_and_data_requests_only(
    document: dict[str, Any],
) -> None:
    stream = document["channels"]["auditStream"]
    assert [b["routingKey"] for b in stream["x-amqp-queue-bindings"]] == [
        "memory.#",
        "operator.#",
        "subject.#",
    ]
    assert set(stream["messages"]) == {
        "MemoryCreated",
        "MemoryUpdated",
        "MemoryDeleted",
        "MemoryRestored",
        "DeadLettersReplayed",
        "DeadLettersPurged",
        "SubjectExported",
        "SubjectErased",
    }
    for name in ("MemoryCreated", "MemoryUpdated", "MemoryDeleted", "MemoryRestored"):
        properties = document["components"]["schemas"][name]["properties"]
        assert not {"content_before", "content_after"} & set(properties)
        assert "revision_id" in properties


def test_the_worker_queue_is_bound_to_every_tool_name(document: dict[str, Any]) -> None:
    topology = Topology()
    assert document["channels"]["workerQueue"]["x-amqp-queue-bindings"] == [
        {"exchange": topology.tool_calls_exchange, "routingKey": name}
        for name in (
            "update_long_term_memory",
            "create_long_term_memory",
            "remember_this_fact",
            "data_request",
        )
    ]


def test_queue_arguments_are_the_ones_declared(document: dict[str, Any]) -> None:
    arguments = {
        name: channel["x-amqp-queue-arguments"]
        for name, channel in document["channels"].items()
        if "x-amqp-queue-arguments" in channel
    }
    assert arguments == {
        "workerQueue": worker_queue_arguments(Topology()),
        "deadLetterQueue": dead_letter_queue_arguments(),
        "shardQueue": shard_queue_arguments(),
        "cacheQueue": {},
        "auditStream": audit_stream_arguments(),
    }


def test_queue_arguments_are_the_contracts() -> None:
    # Written out from docs/contract.md's topology table: the helpers are the one source the
    # processes and the document share, so only this catches a change to them.
    assert worker_queue_arguments(Topology()) == {
        "x-queue-type": "quorum",
        "x-dead-letter-exchange": "ltm.dead_letter",
        "x-dead-letter-strategy": "at-least-once",
        "x-overflow": "reject-publish",
        "x-delivery-limit": 5,
    }
    assert dead_letter_queue_arguments() == {"x-queue-type": "quorum"}
    assert shard_queue_arguments() == {"x-queue-type": "quorum"}
    assert audit_stream_arguments() == {
        "x-queue-type": "stream",
        "x-max-age": "30D",
        "x-stream-max-segment-size-bytes": 50_000_000,
    }


def test_operations_reference_messages_of_their_channel(document: dict[str, Any]) -> None:
    for name, operation in document["operations"].items():
        assert operation["action"] in ("send", "receive"), name
        channel_ref = operation["channel"]["$ref"]
        channel = _resolve(document, channel_ref)
        for message in operation["messages"]:
            assert message["$ref"].startswith(channel_ref + "/messages/"), name
            assert _resolve(document, message["$ref"]) in channel["messages"].values()


def test_importing_contracts_needs_no_yaml() -> None:
    probe = (
        "import sys, builtins\n"
        "real = builtins.__import__\n"
        "def guard(name, *args, **kwargs):\n"
        "    if name == 'yaml' or name.startswith('yaml.'):\n"
        "        raise ImportError('yaml must not be imported')\n"
        "    return real(name, *args, **kwargs)\n"
        "builtins.__import__ = guard\n"
        "import contracts, contracts.asyncapi\n"
        "contracts.asyncapi.build_document()\n"
    )
    subprocess.run([sys.executable, "-c", probe], check=True)


def _resolve(document: dict[str, Any], ref: str) -> Any:
    node: Any = document
    for part in ref.removeprefix("#/").split("/"):
        node = node[part]
    return node
