"""`ltm broker-definitions` imported into a fresh virtual host of the machine's broker: each
role may do its job (the table of docs/security.md, "Broker accounts"), and the topology is the
one the processes declare."""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import aio_pika
import aiormq
import pytest
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractIncomingMessage

from contracts import Topology, result_routing_key
from harness.services import rabbitmqctl
from infra.messaging.accounts import HASHING_ALGORITHM, Role
from infra.messaging.topology import (
    TopologyMissing,
    declare_cache_queue,
    declare_shard_queue,
    declare_topology,
    ensure_topology,
)
from infra.settings import Settings
from tests.support.accounts import BrokerAccounts, broker_accounts


@pytest.fixture(scope="module")
def accounts(
    settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerAccounts]:
    with broker_accounts(settings, tmp_path_factory.mktemp("definitions")) as made:
        yield made


@pytest.fixture
async def connect(
    accounts: BrokerAccounts,
) -> AsyncIterator[Callable[[Role], Awaitable[AbstractConnection]]]:
    opened: list[AbstractConnection] = []

    async def as_role(role: Role) -> AbstractConnection:
        connection = await aio_pika.connect(accounts.url(role))
        opened.append(connection)
        return connection

    yield as_role
    for connection in opened:
        await connection.close()


Connect = Callable[[Role], Awaitable[AbstractConnection]]


async def _refused(
    connection: AbstractConnection, action: Callable[[AbstractChannel], Awaitable[object]]
) -> str:
    """Runs `action` on a channel of its own; it must be refused by the broker (403)."""
    channel = await connection.channel()
    with pytest.raises(aiormq.exceptions.ChannelAccessRefused) as raised:
        await action(channel)
    return str(raised.value)


async def _publish(channel: AbstractChannel, exchange: str, key: str, **properties: object) -> None:
    target = await channel.get_exchange(exchange, ensure=False)
    await target.publish(aio_pika.Message(b"{}", **properties), routing_key=key)  # type: ignore[arg-type]


async def _consume(channel: AbstractChannel, queue: str, **arguments: str) -> None:
    declared = await channel.declare_queue(queue, passive=True)
    await channel.set_qos(prefetch_count=1)

    async def leave(message: AbstractIncomingMessage) -> None:
        """Not settled: the channel hands it back when it closes (streams refuse a nack)."""

    tag = await declared.consume(leave, arguments=dict(arguments) or None)
    await declared.cancel(tag)


def test_the_document_holds_no_password_and_the_processes_topology(
    accounts: BrokerAccounts,
) -> None:
    text = accounts.definitions.read_text()
    document = json.loads(text)
    for role in Role:
        password = urllib.parse.urlsplit(accounts.url(role)).password
        assert password and password not in text
    assert {user["hashing_algorithm"] for user in document["users"]} == {HASHING_ALGORITHM}
    assert {user["name"] for user in document["users"]} == set(accounts.users.values())
    listed = rabbitmqctl("list_queues", "-p", accounts.vhost, "name", "arguments").stdout
    topology = accounts.topology
    for queue in (topology.worker_queue, topology.dead_letter_queue, topology.audit_stream):
        assert queue in listed


async def test_the_worker_declares_the_topology_and_does_its_job(
    accounts: BrokerAccounts, connect: Connect
) -> None:
    topology = accounts.topology
    connection = await connect(Role.WORKER)
    channel = await connection.channel()
    # Declared again with the same arguments: the import and the code agree exactly (a
    # mismatch would close the channel).
    await declare_topology(channel, topology, shards=(0, 7))
    await _consume(channel, topology.worker_queue)
    # An erasure filters the dead letters in place.
    await _consume(channel, topology.dead_letter_queue)
    confirmed = await connection.channel(publisher_confirms=True)
    await _publish(confirmed, topology.events_exchange, result_routing_key(7))
    await _publish(confirmed, topology.dead_letter_exchange, "update_long_term_memory")


async def test_the_bots_publish_calls_and_own_their_queues(
    accounts: BrokerAccounts, connect: Connect
) -> None:
    topology = accounts.topology
    connection = await connect(Role.BOT)
    await ensure_topology(connection, topology)  # there already: checked, not declared
    channel = await connection.channel()
    await declare_shard_queue(channel, topology, 3)
    await _consume(channel, topology.shard_queue(3))
    cache = await declare_cache_queue(channel, topology, "test-instance")
    await cache.delete()
    confirmed = await connection.channel(publisher_confirms=True)
    await _publish(
        confirmed,
        topology.tool_calls_exchange,
        "update_long_term_memory",
        user_id=accounts.users[Role.BOT],
    )


async def test_the_operators_read_dead_letters_and_the_audit_and_replay(
    accounts: BrokerAccounts, connect: Connect
) -> None:
    topology = accounts.topology
    connection = await connect(Role.OPERATOR)
    channel = await connection.channel()
    await _consume(channel, topology.dead_letter_queue)
    await (await channel.declare_queue(topology.dead_letter_queue, passive=True)).purge()
    await _consume(channel, topology.audit_stream, **{"x-stream-offset": "first"})
    confirmed = await connection.channel(publisher_confirms=True)
    await _publish(
        confirmed,
        topology.tool_calls_exchange,
        "update_long_term_memory",
        user_id=accounts.users[Role.OPERATOR],
    )
    await _publish(confirmed, topology.events_exchange, "memory.restored.server_wide")
    await _publish(confirmed, topology.events_exchange, "cache.user.123")


@pytest.mark.parametrize(
    ("role", "what"),
    [
        (Role.BOT, "publish events"),
        (Role.BOT, "publish dead letters"),
        (Role.BOT, "consume the worker queue"),
        (Role.BOT, "consume the dead-letter queue"),
        (Role.BOT, "consume the audit"),
        (Role.BOT, "bind to audit events"),
        (Role.WORKER, "consume the audit"),
        (Role.WORKER, "consume a shard queue"),
        (Role.WORKER, "publish tool calls"),
        (Role.OPERATOR, "consume the worker queue"),
        (Role.OPERATOR, "consume a shard queue"),
        (Role.OPERATOR, "publish results"),
    ],
)
async def test_what_each_role_may_not_do_is_refused_by_the_broker(
    accounts: BrokerAccounts, connect: Connect, role: Role, what: str
) -> None:
    t = accounts.topology
    connection = await connect(role)
    setup = await (await connect(Role.WORKER)).channel()
    await declare_shard_queue(setup, t, 0)
    # What to try, and what the broker's refusal names.
    actions: dict[str, tuple[Callable[[AbstractChannel], Awaitable[object]], str]] = {
        "publish events": (
            lambda ch: _publish(ch, t.events_exchange, "memory.updated.server_wide"),
            f"exchange '{t.events_exchange}'",
        ),
        "publish results": (
            lambda ch: _publish(ch, t.events_exchange, result_routing_key(0)),
            f"topic '{result_routing_key(0)}'",
        ),
        "publish dead letters": (
            lambda ch: _publish(ch, t.dead_letter_exchange, "update_long_term_memory"),
            f"exchange '{t.dead_letter_exchange}'",
        ),
        "publish tool calls": (
            lambda ch: _publish(ch, t.tool_calls_exchange, "update_long_term_memory"),
            f"exchange '{t.tool_calls_exchange}'",
        ),
        "consume the worker queue": (
            lambda ch: _consume(ch, t.worker_queue),
            f"queue '{t.worker_queue}'",
        ),
        "consume the dead-letter queue": (
            lambda ch: _consume(ch, t.dead_letter_queue),
            f"queue '{t.dead_letter_queue}'",
        ),
        "consume the audit": (
            lambda ch: _consume(ch, t.audit_stream, **{"x-stream-offset": "first"}),
            f"queue '{t.audit_stream}'",
        ),
        "consume a shard queue": (
            lambda ch: _consume(ch, t.shard_queue(0)),
            f"queue '{t.shard_queue(0)}'",
        ),
        "bind to audit events": (
            lambda ch: _bind_cache_queue(ch, t, "memory.#"),
            "topic 'memory.#'",
        ),
    }
    action, named = actions[what]
    reason = await _refused(connection, action)
    assert "ACCESS_REFUSED" in reason and named in reason, reason


async def _bind_cache_queue(channel: AbstractChannel, topology: Topology, key: str) -> None:
    events = await channel.get_exchange(topology.events_exchange, ensure=False)
    queue = await channel.declare_queue(topology.cache_queue("snoop"), exclusive=True)
    await queue.bind(events, routing_key=key)


async def test_a_bot_cannot_set_up_a_missing_topology(
    accounts: BrokerAccounts, connect: Connect
) -> None:
    connection = await connect(Role.BOT)
    with pytest.raises(TopologyMissing, match="ltm broker-definitions"):
        await ensure_topology(connection, Topology(accounts.topology.prefix + "-missing"))


def test_the_import_left_other_users_alone(accounts: BrokerAccounts) -> None:
    users = rabbitmqctl("list_users").stdout
    assert "guest" in users
