"""`ltm broker-definitions [--vhost V]`: the RabbitMQ definitions document of this deployment.

The virtual host, the worker's, the bots' and the operators' users with their password hashes
and permissions, and the whole topology (`infra.messaging.accounts`), as JSON for
`rabbitmqctl import_definitions` or the broker's `load_definitions` at boot. Passwords come
from `LTM_BROKER_*_PASSWORD` (or their `_FILE`) and appear only hashed.

Exit codes: 0 printed; 2 a password missing, or two roles given one user.
"""

from __future__ import annotations

import sys
import urllib.parse
from typing import TextIO

import orjson
from pydantic import SecretStr

from contracts import TOOL_NAMES
from infra.messaging.accounts import Role, accounts, definitions
from infra.settings import Settings
from worker.ops.commands import PrintBrokerDefinitions
from worker.ops.output import ExitCode

__all__ = ["default_vhost", "print_definitions"]


def default_vhost(amqp_url: str) -> str:
    """The virtual host `LTM_AMQP_URL` names, `/` when it names none."""
    path = urllib.parse.urlsplit(amqp_url).path
    return urllib.parse.unquote(path[1:]) if len(path) > 1 else "/"


def print_definitions(
    settings: Settings,
    command: PrintBrokerDefinitions,
    *,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
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
        vhost=default_vhost(settings.amqp_urls[0]) if command.vhost is None else command.vhost,
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
