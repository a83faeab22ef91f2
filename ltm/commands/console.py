"""`ltm console [--host H] [--port P]` serves the operators' web console;
`ltm console hash-password` makes the hash it logs in with."""

from __future__ import annotations

import argparse
from typing import Any

from infra.settings import Settings
from ltm.commands.common import add_command, run_async

__all__ = ["add"]


def add(commands: Any) -> None:
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
    console.set_defaults(run=_serve)
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
    hash_password.set_defaults(run=_hash_password)


# Imported when used: the other commands load none of the console's code.
def _serve(args: argparse.Namespace, settings: Settings) -> int:
    from console.app import run_console

    return run_async(run_console(settings, args.host, int(args.port)))


def _hash_password(_: argparse.Namespace, __: Settings) -> int:
    from console.passwords import print_password_hash

    return print_password_hash()
