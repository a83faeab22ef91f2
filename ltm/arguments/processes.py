"""`ltm migrate`, `topology`, `broker-definitions`, `worker`, `gateway`, `console`: the
commands that set up or run a process."""

from __future__ import annotations

import argparse
from typing import Any

from ltm.arguments.common import add_command, on_parsed, parse_shards
from ltm.processes import (
    DeclareTopology,
    HashPassword,
    Migrate,
    RunGateway,
    RunWorker,
    ServeConsole,
)
from worker.ops.commands import PrintBrokerDefinitions

__all__ = ["add_console", "add_gateway", "add_setup", "add_worker"]


def add_setup(commands: Any) -> None:
    """`ltm migrate`, `ltm topology` and `ltm broker-definitions`."""
    migrate = add_command(
        commands, "migrate", "create the database if needed and upgrade its schema"
    )
    migrate.add_argument(
        "--roles",
        action="store_true",
        help="also create the roles ltm_worker, ltm_gateway and ltm_operator (without login) "
        "when missing, and grant each only what it uses",
    )
    on_parsed(migrate, lambda args: Migrate(roles=bool(args.roles)))
    topology = add_command(
        commands,
        "topology",
        "declare the exchanges and queues",
        "Shard queues 0 to LTM_SHARD_COUNT-1 are declared too; declaring again changes nothing.",
    )
    on_parsed(topology, lambda _: DeclareTopology())
    definitions = add_command(
        commands,
        "broker-definitions",
        "print the broker's definitions: accounts per role and the topology",
        "JSON for `rabbitmqctl import_definitions` or the broker's load_definitions: the "
        "virtual host, the users of LTM_BROKER_WORKER_USER, LTM_BROKER_BOT_USER and "
        "LTM_BROKER_OPERATOR_USER with their permissions and password hashes (passwords from "
        "LTM_BROKER_*_PASSWORD), and every exchange, queue and binding. Exit code 2 when a "
        "password is missing.",
    )
    definitions.add_argument(
        "--vhost",
        metavar="V",
        help="the virtual host (default: the one LTM_AMQP_URL names, else /)",
    )
    on_parsed(definitions, lambda args: PrintBrokerDefinitions(vhost=args.vhost))


def add_worker(commands: Any) -> None:
    worker = add_command(
        commands,
        "worker",
        "run the worker until SIGTERM or SIGINT",
        "On SIGTERM or SIGINT it stops taking calls, drains those in flight (at most "
        "LTM_SHUTDOWN_GRACE_S) and exits 0.",
    )
    on_parsed(worker, lambda _: RunWorker())


def add_gateway(commands: Any) -> None:
    gateway = add_command(
        commands,
        "gateway",
        "run a gateway process for some shards",
        "It posts the embeds of those shards and drops stale caches; without DISCORD_TOKEN it "
        "draws each embed in the terminal instead.",
    )
    gateway.add_argument(
        "--shards",
        type=parse_shards,
        required=True,
        metavar="N,N",
        help="the shards this process serves, e.g. 0,1",
    )
    gateway.add_argument(
        "--shard-count", type=int, required=True, metavar="N", help="how many shards the bot has"
    )
    on_parsed(gateway, _run_gateway)


def _run_gateway(args: argparse.Namespace) -> RunGateway:
    return RunGateway(shards=tuple(args.shards), shard_count=int(args.shard_count))


def add_console(commands: Any) -> None:
    console = add_command(
        commands,
        "console",
        "serve the operators' web console",
        "Overview, dead letters (replay, purge), memories (history, restore) and the audit "
        "stream in a browser. It needs LTM_CONSOLE_PASSWORD_HASH (`ltm console hash-password` "
        "makes one) and runs with the operator's LTM_DATABASE_URL and LTM_AMQP_URL; every "
        "replay, purge and restore is recorded as console:<the name given at login>.",
    )
    console.add_argument(
        "--host",
        default="127.0.0.1",
        metavar="HOST",
        help="the address to listen on (default: 127.0.0.1, this host only)",
    )
    console.add_argument(
        "--port", type=int, default=8080, metavar="PORT", help="the port (default: 8080)"
    )
    on_parsed(console, lambda args: ServeConsole(host=args.host, port=int(args.port)))
    console_commands = console.add_subparsers(
        dest="console_command", metavar="ACTION", title="actions"
    )
    hash_password = add_command(
        console_commands,
        "hash-password",
        "print the hash of a password for LTM_CONSOLE_PASSWORD_HASH",
        "Asks for the password twice on a terminal, or reads one line from standard input, "
        "and prints its Argon2id hash. At least 12 characters.",
    )
    on_parsed(hash_password, lambda _: HashPassword())
