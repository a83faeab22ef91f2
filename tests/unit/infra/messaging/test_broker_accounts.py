"""The accounts' permissions and the definitions document, without a broker."""

from __future__ import annotations

import base64
import hashlib
import re

import pytest

from contracts import TOOL_NAMES, Topology, topology_declarations, worker_queue_arguments
from infra.messaging.accounts import (
    HASHING_ALGORITHM,
    Account,
    Role,
    accounts,
    definitions,
    password_hash,
)

TOPOLOGY = Topology("ltm")
USERS = {Role.WORKER: "w", Role.BOT: "b", Role.OPERATOR: "o"}


def test_the_hash_is_rabbitmqs_salted_sha256() -> None:
    stored = base64.b64decode(password_hash("s3cret", salt=b"\x01\x02\x03\x04"))
    assert stored[:4] == b"\x01\x02\x03\x04"
    assert stored[4:] == hashlib.sha256(b"\x01\x02\x03\x04s3cret").digest()


def test_each_hash_has_a_salt_of_its_own() -> None:
    assert password_hash("same") != password_hash("same")


def _account(role: Role) -> Account:
    [found] = [account for account in accounts(TOPOLOGY, USERS) if account.role is role]
    return found


def _matches(pattern: str, name: str) -> bool:
    return re.fullmatch(pattern, name) is not None


@pytest.mark.parametrize(
    ("role", "permission", "name", "allowed"),
    [
        (Role.BOT, "write", "ltm.tool_calls", True),
        (Role.BOT, "write", "ltm.events", False),
        (Role.BOT, "write", "ltm.dead_letter", False),
        (Role.BOT, "read", "ltm.gateway.shard.12", True),
        (Role.BOT, "read", "ltm.gateway.cache.host-1-abc", True),
        (Role.BOT, "read", "ltm.tool_calls.worker", False),
        (Role.BOT, "read", "ltm.tool_calls.dead", False),
        (Role.BOT, "read", "ltm.audit", False),
        (Role.BOT, "read", "ltm.tool_calls", False),  # binding a queue of its own to the calls
        (Role.BOT, "configure", "ltm.events", False),
        (Role.BOT, "configure", "ltm.tool_calls.worker", False),
        (Role.WORKER, "read", "ltm.tool_calls.worker", True),
        (Role.WORKER, "read", "ltm.audit", False),
        # An erasure filters the dead letters in place.
        (Role.WORKER, "read", "ltm.tool_calls.dead", True),
        (Role.WORKER, "read", "ltm.gateway.shard.0", False),
        (Role.WORKER, "write", "ltm.tool_calls", False),
        (Role.WORKER, "configure", "ltm.gateway.shard.123", True),
        (Role.WORKER, "configure", "ltm.gateway.cache.x", False),
        (Role.OPERATOR, "read", "ltm.tool_calls.dead", True),
        (Role.OPERATOR, "read", "ltm.audit", True),
        (Role.OPERATOR, "read", "ltm.tool_calls.worker", False),
        (Role.OPERATOR, "read", "ltm.gateway.shard.0", False),
        (Role.OPERATOR, "configure", "ltm.tool_calls.dead", False),
        # The reply queues of its data requests, and nothing else.
        (Role.OPERATOR, "configure", "ltm.operator.abc123", True),
        (Role.OPERATOR, "read", "ltm.operator.abc123", True),
        (Role.OPERATOR, "configure", "ltm.gateway.shard.0", False),
        (Role.OPERATOR, "configure", "ltm.operator.", False),
        # Another deployment's names under a longer prefix are not ours.
        (Role.WORKER, "read", "ltm2.tool_calls.worker", False),
        (Role.BOT, "configure", "ltmx.gateway.shard.0", False),
    ],
)
def test_the_permissions_of_each_role(
    role: Role, permission: str, name: str, allowed: bool
) -> None:
    assert _matches(getattr(_account(role).grant, permission), name) is allowed


@pytest.mark.parametrize(
    ("role", "permission", "key", "allowed"),
    [
        (Role.BOT, "read", "result.shard.3", True),
        (Role.BOT, "read", "embed.shard.3", True),
        (Role.BOT, "read", "cache.#", True),
        (Role.BOT, "read", "memory.#", False),
        (Role.BOT, "read", "#", False),
        (Role.BOT, "read", "result.#", False),
        (Role.OPERATOR, "write", "memory.restored.server_wide", True),
        (Role.OPERATOR, "write", "cache.user.123", True),
        (Role.OPERATOR, "write", "result.shard.0", False),
        (Role.OPERATOR, "write", "memory.updated.server_wide", False),
        # The answers of its data requests; never the audit events.
        (Role.OPERATOR, "read", "result.shard.1000000", True),
        (Role.OPERATOR, "read", "memory.#", False),
        (Role.OPERATOR, "read", "#", False),
    ],
)
def test_the_routing_keys_of_the_events_exchange(
    role: Role, permission: str, key: str, allowed: bool
) -> None:
    [grant] = _account(role).topic_grants
    assert grant.exchange == "ltm.events"
    assert _matches(getattr(grant, permission), key) is allowed


# Hyphens are no base64 character: no salted hash can hold it by chance (a short one could).
PASSWORD = "the-password-itself"


def test_the_document_is_the_topology_the_processes_declare() -> None:
    document = definitions(
        TOPOLOGY,
        vhost="v",
        accounts_with_passwords=[(account, PASSWORD) for account in accounts(TOPOLOGY, USERS)],
        tool_names=TOOL_NAMES,
        shards=range(2),
    )
    declared = topology_declarations(TOPOLOGY, TOOL_NAMES, range(2))
    assert [e["name"] for e in document["exchanges"]] == list(declared.exchanges)
    assert {q["name"]: q["arguments"] for q in document["queues"]} == {
        q.name: dict(q.arguments) for q in declared.queues
    }
    assert {q["name"]: q["arguments"] for q in document["queues"]}["ltm.tool_calls.worker"] == (
        worker_queue_arguments(TOPOLOGY)
    )
    assert [(b["source"], b["destination"], b["routing_key"]) for b in document["bindings"]] == [
        (b.exchange, b.queue, b.routing_key) for b in declared.bindings
    ]
    assert {u["hashing_algorithm"] for u in document["users"]} == {HASHING_ALGORITHM}
    assert PASSWORD not in str(document)
    assert {p["vhost"] for p in document["permissions"]} == {"v"}
