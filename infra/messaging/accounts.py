"""The broker accounts of a deployment, one per role, and the RabbitMQ definitions document
(`ltm broker-definitions`) that creates them with the whole topology.

Each role may do its job and nothing more (docs/security.md, "Broker accounts"). RabbitMQ checks
three permissions, each a regular expression over the names of exchanges and queues:
`configure` (declare, delete), `write` (publish to an exchange; bind a queue) and `read`
(consume or purge a queue; bind from an exchange). Topic permissions narrow the routing keys
a user may bind with (read) or publish with (write) on a topic exchange: without them, a bot
could bind its own queue to every event, the audit's included.

The topology in the document is `contracts.topology_declarations`, what the processes
declare, so that the two cannot diverge.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from contracts import Declarations, Topology, topology_declarations

__all__ = [
    "HASHING_ALGORITHM",
    "Account",
    "Grant",
    "Role",
    "TopicGrant",
    "accounts",
    "definitions",
    "password_hash",
]

HASHING_ALGORITHM: Final = "rabbit_password_hashing_sha256"
_SALT_BYTES: Final = 4


class Role(StrEnum):
    WORKER = "worker"
    BOT = "bot"  # bot shards, gateway processes and `ltm call`
    OPERATOR = "operator"  # `ltm dlq`, `ltm audit`, `ltm memory`


@dataclass(frozen=True, slots=True)
class Grant:
    """A user's permissions in the virtual host: regular expressions over names."""

    configure: str
    write: str
    read: str


@dataclass(frozen=True, slots=True)
class TopicGrant:
    """Routing keys a user may publish with (`write`) or bind with (`read`) on `exchange`."""

    exchange: str
    write: str
    read: str


@dataclass(frozen=True, slots=True)
class Account:
    role: Role
    user: str
    grant: Grant
    topic_grants: tuple[TopicGrant, ...] = ()


# Matches no name at all: RabbitMQ's own way to grant nothing.
_NOTHING: Final = "^$"


def _exactly(*names: str) -> str:
    return "^(?:" + "|".join(re.escape(name) for name in names) + ")$"


def _exactly_or(names: Iterable[str], *patterns: str) -> str:
    """Any of `names`, or a name matching one of `patterns` (unanchored regular expressions)."""
    return "^(?:" + "|".join([*(re.escape(name) for name in names), *patterns]) + ")$"


def _worker_grant(t: Topology) -> Grant:
    """The worker's permissions: its topology, its queue, and publishing what it emits."""
    shard_queues = re.escape(t.shard_queue(0)).removesuffix("0") + r"\d+"
    return Grant(
        # The topology, and a shard's queue the first time it replies to that shard.
        configure=_exactly_or(
            (
                t.tool_calls_exchange,
                t.dead_letter_exchange,
                t.events_exchange,
                t.worker_queue,
                t.dead_letter_queue,
                t.audit_stream,
            ),
            shard_queues,
        ),
        # Publishing events and dead letters; binding the topology's queues.
        write=_exactly_or(
            (
                t.events_exchange,
                t.dead_letter_exchange,
                t.worker_queue,
                t.dead_letter_queue,
                t.audit_stream,
            ),
            shard_queues,
        ),
        # Consuming its queue (declaring it with a dead-letter exchange needs this too),
        # binding from the three exchanges, and an erasure's pass over the dead letters (it
        # put every letter there, and saw every call).
        read=_exactly(
            t.tool_calls_exchange,
            t.dead_letter_exchange,
            t.events_exchange,
            t.worker_queue,
            t.dead_letter_queue,
        ),
    )


def accounts(topology: Topology, users: Mapping[Role, str]) -> tuple[Account, ...]:
    """The three roles' accounts under `topology`'s names, for the given user names."""
    t = topology
    gateway_queues = re.escape(t.gateway_queues_prefix) + ".+"
    bot = Grant(
        configure="^" + gateway_queues + "$",
        write=_exactly_or((t.tool_calls_exchange,), gateway_queues),
        read=_exactly_or((t.events_exchange,), gateway_queues),
    )
    bot_topics = (
        # Its shards' results, embeds and retractions, and every invalidation; never the audit
        # events.
        TopicGrant(
            t.events_exchange,
            write=_NOTHING,
            read=r"^(?:(?:result|embed|retract)\.shard\.\d+|cache\.#)$",
        ),
    )
    # Its own reply queues, for the answer of a data request it published.
    operator_queues = re.escape(t.operator_queue("")) + ".+"
    operator = Grant(
        configure="^" + operator_queues + "$",
        # Replaying to the work exchange, and data requests; a restore's audit event and
        # invalidation; binding its reply queues.
        write=_exactly_or((t.tool_calls_exchange, t.events_exchange), operator_queues),
        read=_exactly_or((t.dead_letter_queue, t.audit_stream, t.events_exchange), operator_queues),
    )
    operator_topics = (
        TopicGrant(
            t.events_exchange,
            # A restore's or a revert's audit events and invalidations, and the audit records
            # of what an operator did (`operator.*`: replays, purges, reverts).
            write=r"^(?:memory\.restored|cache|operator)\..+$",
            # The answers of its data requests, on the shard its requests name.
            read=r"^result\.shard\.\d+$",
        ),
    )
    return (
        Account(Role.WORKER, users[Role.WORKER], _worker_grant(t)),
        Account(Role.BOT, users[Role.BOT], bot, bot_topics),
        Account(Role.OPERATOR, users[Role.OPERATOR], operator, operator_topics),
    )


def password_hash(password: str, salt: bytes | None = None) -> str:
    """RabbitMQ's `rabbit_password_hashing_sha256`: base64(salt + sha256(salt + password)),
    with a random 4-byte salt."""
    salt = os.urandom(_SALT_BYTES) if salt is None else salt
    if len(salt) != _SALT_BYTES:
        raise ValueError(f"a salt is {_SALT_BYTES} bytes")
    digest = hashlib.sha256(salt + password.encode("utf-8")).digest()
    return base64.b64encode(salt + digest).decode("ascii")


def definitions(
    topology: Topology,
    *,
    vhost: str,
    accounts_with_passwords: Iterable[tuple[Account, str]],
    tool_names: Iterable[str],
    shards: Iterable[int] = (),
) -> dict[str, Any]:
    """The document `rabbitmqctl import_definitions` and the broker's `load_definitions` read:
    the virtual host, the users (password hashes only), their permissions, the topology."""
    listed = list(accounts_with_passwords)
    return {
        "vhosts": [{"name": vhost}],
        "users": [
            {
                "name": account.user,
                "password_hash": password_hash(password),
                "hashing_algorithm": HASHING_ALGORITHM,
                "tags": [],
            }
            for account, password in listed
        ],
        "permissions": [
            {
                "user": account.user,
                "vhost": vhost,
                "configure": account.grant.configure,
                "write": account.grant.write,
                "read": account.grant.read,
            }
            for account, _ in listed
        ],
        "topic_permissions": [
            {
                "user": account.user,
                "vhost": vhost,
                "exchange": grant.exchange,
                "write": grant.write,
                "read": grant.read,
            }
            for account, _ in listed
            for grant in account.topic_grants
        ],
        **_topology(topology_declarations(topology, tool_names, shards), vhost),
    }


def _topology(declarations: Declarations, vhost: str) -> dict[str, Any]:
    return {
        "exchanges": [
            {
                "name": name,
                "vhost": vhost,
                "type": "topic",
                "durable": True,
                "auto_delete": False,
                "internal": False,
                "arguments": {},
            }
            for name in declarations.exchanges
        ],
        "queues": [
            {
                "name": queue.name,
                "vhost": vhost,
                "durable": True,
                "auto_delete": False,
                "arguments": dict(queue.arguments),
            }
            for queue in declarations.queues
        ],
        "bindings": [
            {
                "source": binding.exchange,
                "vhost": vhost,
                "destination": binding.queue,
                "destination_type": "queue",
                "routing_key": binding.routing_key,
                "arguments": {},
            }
            for binding in declarations.bindings
        ],
    }
