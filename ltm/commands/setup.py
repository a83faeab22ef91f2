"""`ltm migrate`, `ltm topology` and `ltm broker-definitions`: the commands that set up the
database and the broker before any process runs.

`ltm topology --recreate-audit-stream [--yes]` deletes the audit stream, every event it holds
with it, and declares it again: once, after upgrading a deployment whose stream still holds
`memory.*` events of schema_version 1 (with the memories' texts, which an erasure could not
reach there). It asks first, on a terminal; without one it needs `--yes`. Exit codes: 0 done,
1 the answer was not yes (nothing deleted), 2 no terminal to ask on and no `--yes`.

`ltm broker-definitions [--vhost V]` prints the RabbitMQ definitions document of this
deployment: the virtual host, the worker's, the bots' and the operators' users with their
password hashes and permissions, and the whole topology (`infra.messaging.accounts`), as JSON
for `rabbitmqctl import_definitions` or the broker's `load_definitions` at boot. Passwords come
from `LTM_BROKER_*_PASSWORD` (or their `_FILE`) and appear only hashed. Exit codes: 0 printed;
2 a password missing, or two roles given one user.
"""

from __future__ import annotations

import argparse
import sys
import urllib.parse
from typing import Any, TextIO

import orjson
from pydantic import SecretStr

from contracts import TOOL_NAMES
from infra.settings import Settings
from ltm.commands.common import add_command, run_async
from operators.display import ExitCode

__all__ = ["add", "confirm_recreating_audit_stream", "default_vhost", "print_definitions"]


def add(commands: Any) -> None:
    migrate = add_command(
        commands, "migrate", "create the database if needed and upgrade its schema"
    )
    migrate.add_argument(
        "--roles",
        action="store_true",
        help="also create the roles ltm_worker, ltm_gateway and ltm_operator (without login) "
        "when missing, and grant each only what it uses",
    )
    migrate.set_defaults(run=_run_migrate)
    topology = add_command(
        commands,
        "topology",
        "declare the exchanges and queues",
        "Shard queues 0 to LTM_SHARD_COUNT-1 are declared too; declaring again changes nothing.",
    )
    topology.add_argument(
        "--recreate-audit-stream",
        action="store_true",
        help="delete the audit stream and every event it holds, then declare it again: once, "
        "after upgrading a deployment whose stream holds memory events of schema_version 1 "
        "(with texts); asks first",
    )
    topology.add_argument(
        "--yes", action="store_true", help="with --recreate-audit-stream: do not ask"
    )
    topology.set_defaults(run=_run_topology)
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
    definitions.set_defaults(run=lambda args, settings: print_definitions(settings, args.vhost))


def _run_migrate(args: argparse.Namespace, settings: Settings) -> int:
    from ltm.composition import migrate

    return migrate(settings, roles=bool(args.roles))


def _run_topology(args: argparse.Namespace, settings: Settings) -> int:
    from ltm.composition import declare_topology

    recreate = bool(args.recreate_audit_stream)
    if recreate and not args.yes:
        code = confirm_recreating_audit_stream(settings)
        if code != ExitCode.OK:
            return code
    return run_async(declare_topology(settings, recreate_audit_stream=recreate))


def confirm_recreating_audit_stream(
    settings: Settings,
    *,
    stdin: TextIO | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Asks on a terminal before the audit stream is deleted: `ExitCode.OK` to go on; USAGE
    without a terminal (a script must say `--yes`); FAILED for any answer but yes."""
    reader, out, err = stdin or sys.stdin, out or sys.stdout, err or sys.stderr
    stream = settings.topology.audit_stream
    if not reader.isatty():
        print(
            f"ltm topology --recreate-audit-stream deletes {stream} and every event it holds: "
            "pass --yes to do it without a terminal to ask on",
            file=err,
        )
        return ExitCode.USAGE
    print(
        f"delete {stream} and every event it holds (30 days of audit trail), "
        "then declare it again? [y/N] ",
        end="",
        file=out,
        flush=True,
    )
    if reader.readline().strip().lower() in ("y", "yes"):
        return ExitCode.OK
    print("nothing deleted (answer y, or pass --yes)", file=err)
    return ExitCode.FAILED


def default_vhost(amqp_url: str) -> str:
    """The virtual host `LTM_AMQP_URL` names, `/` when it names none."""
    path = urllib.parse.urlsplit(amqp_url).path
    return urllib.parse.unquote(path[1:]) if len(path) > 1 else "/"


def print_definitions(
    settings: Settings,
    vhost: str | None = None,
    *,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """The definitions document; `vhost` None takes the one `LTM_AMQP_URL` names."""
    from infra.messaging.accounts import Role, accounts, definitions

    out, err = out or sys.stdout, err or sys.stderr
    users = {
        Role.WORKER: settings.broker_worker_user,
        Role.BOT: settings.broker_bot_user,
        Role.OPERATOR: settings.broker_operator_user,
    }
    passwords: dict[Role, SecretStr | None] = {
        Role.WORKER: settings.broker_worker_password,
        Role.BOT: settings.broker_bot_password,
        Role.OPERATOR: settings.broker_operator_password,
    }
    missing = [
        f"LTM_BROKER_{role.upper()}_PASSWORD"
        for role, password in passwords.items()
        if password is None or not password.get_secret_value()
    ]
    if missing:
        # An account without a password would be one anybody can log in to.
        print(
            f"ltm broker-definitions: set {', '.join(missing)} (or the same with _FILE): "
            "every account needs a password",
            file=err,
        )
        return ExitCode.USAGE
    if len(set(users.values())) < len(users):
        print(
            "ltm broker-definitions: each role needs a user of its own "
            "(LTM_BROKER_WORKER_USER, LTM_BROKER_BOT_USER, LTM_BROKER_OPERATOR_USER)",
            file=err,
        )
        return ExitCode.USAGE
    topology = settings.topology
    document = definitions(
        topology,
        vhost=default_vhost(settings.amqp_urls[0]) if vhost is None else vhost,
        accounts_with_passwords=[
            (account, _revealed(passwords[account.role])) for account in accounts(topology, users)
        ],
        tool_names=TOOL_NAMES,
        shards=range(settings.shard_count),
    )
    out.write(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n")
    return ExitCode.OK


def _revealed(password: SecretStr | None) -> str:
    assert password is not None  # checked above
    return password.get_secret_value()
