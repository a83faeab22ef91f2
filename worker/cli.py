"""`ltm`: the one console script. Thin: it parses, then hands over to the composition root."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import textwrap
from collections.abc import Coroutine, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import aiormq.exceptions
import psycopg
import sqlalchemy.exc
from pydantic import TypeAdapter, ValidationError

from contracts import DiscordId
from infra.logs import configure_logging
from infra.redaction import mask_passwords
from infra.settings import Settings, SettingsError
from infra.tracing import configure_tracing
from worker.ops.output import ExitCode

__all__ = ["build_parser", "main"]

PACKAGE = "tomori-ltm"
_HELP_WIDTH = 79

_EPILOG = f"""\
exit codes:
  {ExitCode.OK:<3}  done
  {ExitCode.FAILED:<3}  failed or refused, or a tool call answered success: false
  {ExitCode.USAGE:<3}  usage error: bad arguments, or a file that is not a tool call
  {ExitCode.NOT_FOUND:<3}  not found: the memory, revision or dead letter named does not exist
  {ExitCode.OUTPUT_CLOSED:<3}  the output was closed before the end (| head)

Settings come from the environment (LTM_DATABASE_URL, LTM_AMQP_URL, LTM_AMQP_PREFIX, ...);
tracing from the standard OTEL_* variables (OTEL_EXPORTER_OTLP_ENDPOINT, ...).
`ltm COMMAND --help` describes each command."""

_JSON_HELP = {
    "list": "print a JSON array, one object per dead letter",
    "replay": "print one JSON object: what was replayed and what failed",
    "purge": "print one JSON object with the number removed",
    "tail": "print each event's JSON body, one a line (JSON lines)",
    "history": "print a JSON array of the revisions, contents whole",
    "restore": "print one JSON object: the memory, its content and the new revision",
    "list_memories": 'print one JSON object: {"server": [...], "personal": {"<user id>": [...]}}',
}


def _parse_shards(text: str) -> tuple[int, ...]:
    try:
        shards = tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of shard numbers: {text}") from None
    if not shards or min(shards) < 0:
        raise argparse.ArgumentTypeError("give at least one shard number, each >= 0")
    return shards


def _discord_id(text: str) -> str:
    try:
        return TypeAdapter(DiscordId).validate_python(text)
    except ValidationError:
        raise argparse.ArgumentTypeError(f"not a Discord id (digits): {text!r}") from None


def _package_version() -> str:
    try:
        return version(PACKAGE)
    except PackageNotFoundError:  # pragma: no cover - run from a tree that was never installed
        return "unknown (not installed)"


def _command(group: Any, name: str, summary: str, details: str = "") -> argparse.ArgumentParser:
    """A subcommand whose `--help` starts with the line `ltm --help` lists it with."""
    description = summary[0].upper() + summary[1:] + "."
    if details:
        description += "\n\n" + textwrap.fill(details, _HELP_WIDTH)
    parser: argparse.ArgumentParser = group.add_parser(
        name,
        help=summary,
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser


def _json_flag(parser: argparse.ArgumentParser, action: str) -> None:
    parser.add_argument("--json", dest="as_json", action="store_true", help=_JSON_HELP[action])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ltm",
        description="Long-term-memory update service: the worker, its gateway, and the "
        "operators' commands.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"ltm {_package_version()}",
        help="print the installed version and exit",
    )
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", title="commands"
    )

    migrate = _command(commands, "migrate", "create the database if needed and upgrade its schema")
    migrate.add_argument(
        "--roles",
        action="store_true",
        help="also create the roles ltm_worker, ltm_gateway and ltm_operator (without login) "
        "when missing, and grant each only what it uses",
    )
    _command(
        commands,
        "topology",
        "declare the exchanges and queues",
        "Shard queues 0 to LTM_SHARD_COUNT-1 are declared too; declaring again changes nothing.",
    )
    definitions = _command(
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
    _command(
        commands,
        "worker",
        "run the worker until SIGTERM or SIGINT",
        "On SIGTERM or SIGINT it stops taking calls, drains those in flight (at most "
        "LTM_SHUTDOWN_GRACE_S) and exits 0.",
    )

    gateway = _command(
        commands,
        "gateway",
        "run a gateway process for some shards",
        "It posts the embeds of those shards and drops stale caches; without DISCORD_TOKEN it "
        "draws each embed in the terminal instead.",
    )
    gateway.add_argument(
        "--shards",
        type=_parse_shards,
        required=True,
        metavar="N,N",
        help="the shards this process serves, e.g. 0,1",
    )
    gateway.add_argument(
        "--shard-count", type=int, required=True, metavar="N", help="how many shards the bot has"
    )

    call = _command(
        commands,
        "call",
        "publish one tool call and print its result",
        "FILE holds a tool_call.requested, or only some of its fields (tool_name, arguments, "
        "context): the envelope (event_id, tool_call_id, ...) is filled in. A tool name no "
        "queue is bound for is refused at once. Exit code 0 when the call succeeded, 1 when it "
        "was answered success: false, refused, or not answered in time.",
    )
    call.add_argument(
        "file", nargs="?", metavar="FILE", help="the call as JSON; - reads it from stdin"
    )
    call.add_argument(
        "--json",
        dest="json",
        nargs="?",
        const=True,
        default=False,
        metavar="FILE",
        help="print the result as the tool_call.completed event's JSON; `--json FILE`, the "
        "older spelling, still works",
    )
    call.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        metavar="S",
        help="how long to wait for the result, in seconds (default: 30)",
    )
    call.set_defaults(call_parser=call)

    dlq = _command(
        commands,
        "dlq",
        "the dead-letter queue: calls the worker or the broker gave up on",
        "Each keeps its body, routing key and properties, with why and when it was given up on.",
    )
    dlq_commands = dlq.add_subparsers(
        dest="dlq_command", required=True, metavar="ACTION", title="actions"
    )
    listing = _command(
        dlq_commands,
        "list",
        "show the dead-lettered calls (nothing is consumed)",
        "At most the first 10,000. Each is handed back to the queue when the listing ends.",
    )
    _json_flag(listing, "list")
    replay = _command(
        dlq_commands,
        "replay",
        "send dead-lettered calls back to the worker",
        "Each goes back to the tool-call exchange with its original routing key and properties, "
        "and leaves the dead-letter queue once the broker confirmed it. A call that was already "
        "applied is answered from the idempotency record and changes nothing.",
    )
    which = replay.add_mutually_exclusive_group(required=True)
    which.add_argument("--all", action="store_true", help="every dead letter there is now")
    which.add_argument(
        "--id", dest="event_id", metavar="EVENT_ID", help="the dead letter with this event id"
    )
    _json_flag(replay, "replay")
    purge = _command(dlq_commands, "purge", "remove every dead-lettered call")
    purge.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    _json_flag(purge, "purge")

    audit = _command(commands, "audit", "the audit stream and the memories' revisions")
    audit_commands = audit.add_subparsers(
        dest="audit_command", required=True, metavar="ACTION", title="actions"
    )
    tail = _command(
        audit_commands,
        "tail",
        "print the audit stream from an offset, one line per event",
        "Without --follow it ends once it has printed what the stream held when it began.",
    )
    tail.add_argument(
        "--from",
        dest="start",
        default="first",
        metavar="first|last|TIME",
        help="where to start: the first event kept, the last event, or the first event at or "
        "after TIME (RFC 3339, or 'YYYY-MM-DD HH:MM', UTC unless it says otherwise; "
        "default: first)",
    )
    tail.add_argument("--follow", action="store_true", help="keep printing new events until Ctrl-C")
    _json_flag(tail, "tail")
    history = _command(
        audit_commands,
        "history",
        "a memory's revisions, oldest first",
        "`ltm memory restore REVISION` puts the memory back as it was before a revision "
        "(its BEFORE). Contents are cut at 40 columns here; --json has them whole.",
    )
    history.add_argument("memory_id", type=int, metavar="MEMORY_ID", help="the memory's id")
    _json_flag(history, "history")

    memory = _command(commands, "memory", "read memories, or change them by hand")
    memory_commands = memory.add_subparsers(
        dest="memory_command", required=True, metavar="ACTION", title="actions"
    )
    restore = _command(
        memory_commands,
        "restore",
        "put a memory back as it was before a revision",
        "A deleted memory is re-created under its id. The restore is a revision of its own, "
        "with an audit event and a cache invalidation, and posts no embed.",
    )
    restore.add_argument(
        "revision_id",
        type=int,
        metavar="REVISION",
        help="the revision to undo (the REVISION column of `ltm audit history`)",
    )
    restore.add_argument(
        "--actor",
        default="cli",
        metavar="NAME",
        help="who the revision records as making the change (default: cli)",
    )
    _json_flag(restore, "restore")
    listing = _command(
        memory_commands,
        "list",
        "the memories a persona sees, as the LLM reads them",
        "The server memories of the server and the persona's lineage, then each named user's "
        "personal memories of that lineage and of the global lineage 0, newest first, one "
        "`ID:<id> <content>` line each.",
    )
    listing.add_argument(
        "--guild",
        type=_discord_id,
        required=True,
        metavar="ID",
        help="the guild's id (in a DM: the user's)",
    )
    listing.add_argument(
        "--persona", type=int, required=True, metavar="PERSONA_ID", help="the persona's id"
    )
    listing.add_argument(
        "--user",
        dest="users",
        type=_discord_id,
        action="append",
        default=[],
        metavar="USER_ID",
        help="also this user's personal memories (repeatable)",
    )
    _json_flag(listing, "list_memories")

    console = _command(
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
    console_commands = console.add_subparsers(
        dest="console_command", metavar="ACTION", title="actions"
    )
    _command(
        console_commands,
        "hash-password",
        "print the hash of a password for LTM_CONSOLE_PASSWORD_HASH",
        "Asks for the password twice on a terminal, or reads one line from standard input, "
        "and prints its Argon2id hash. At least 12 characters.",
    )
    return parser


def _run(coroutine: Coroutine[Any, Any, int]) -> int:
    try:
        import uvloop

        return uvloop.run(coroutine)
    except ImportError:  # pragma: no cover - uvloop is not on every platform
        return asyncio.run(coroutine)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = Settings()
    except (ValidationError, SettingsError) as error:
        _say(args.command, error)
        return ExitCode.USAGE
    configure_logging(settings.log_level, settings.log_format)
    # OTEL_SERVICE_NAME, when set, names the process instead.
    configure_tracing(f"ltm-{args.command}")
    try:
        code = _dispatch(args, settings)
        # Now, while a closed output can still be told apart: at exit it would be a traceback.
        sys.stdout.flush()
    except BrokenPipeError:
        return _output_closed()
    except (
        OSError,
        psycopg.OperationalError,
        sqlalchemy.exc.OperationalError,
        aiormq.exceptions.ChannelAccessRefused,
    ) as error:
        # A broker or database that does not answer or refuses this account: one line.
        _say(args.command, error)
        return ExitCode.FAILED
    return code


def _output_closed() -> int:
    """The reader went away (`ltm … | head`): end quietly, as a command killed by SIGPIPE.

    Both outputs point at /dev/null from now on: what is still buffered, and any last log
    line, must not meet the broken pipe again while the interpreter exits.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(devnull, stream.fileno())
        except (OSError, ValueError):  # not a real file (a test's capture): nothing to redirect
            continue
    os.close(devnull)
    return ExitCode.OUTPUT_CLOSED


def _read_call(args: argparse.Namespace) -> bytes:
    """The call file: positional, or after `--json` (the older spelling)."""
    parser: argparse.ArgumentParser = args.call_parser
    older: str | None = args.json if isinstance(args.json, str) else None
    if args.file is not None and older is not None:
        parser.error("give the call file once: ltm call FILE [--json]")
    path: str | None = args.file or older
    if path is None:
        parser.error("the call file is missing: ltm call FILE (- reads stdin)")
    if path == "-":
        return sys.stdin.buffer.read()
    try:
        return Path(path).read_bytes()
    except OSError as error:
        parser.error(f"cannot read {path}: {error.strerror or error}")


def _say(command: str, error: BaseException) -> None:
    text = " ".join(str(error).split())  # one line, whatever the library put in
    print(mask_passwords(f"ltm {command}: {type(error).__name__}: {text}"), file=sys.stderr)


def _dispatch(args: argparse.Namespace, settings: Settings) -> int:
    from worker import bootstrap

    match args.command:
        case "migrate":
            from infra.database import database_name, migrate

            name = database_name(settings.database_url)
            created = migrate(settings.database_url)
            found = f"created database {name}" if created else f"database {name} exists"
            print(f"{found}; its schema is up to date")
            if args.roles:
                from infra.database_roles import ROLES, grant_roles

                grant_roles(settings.database_url)
                print(f"roles {', '.join(ROLES)} exist, granted what each uses in {name}")
            return ExitCode.OK
        case "topology":
            return _run(bootstrap.declare_topology(settings))
        case "broker-definitions":
            from worker.ops.broker_definitions import print_definitions

            return print_definitions(settings, vhost=args.vhost)
        case "worker":
            return _run(bootstrap.run_worker(settings))
        case "gateway":
            return _run(bootstrap.run_gateway(settings, args.shards, args.shard_count))
        case "call":
            body = _read_call(args)
            return _run(bootstrap.call(settings, body, args.timeout, as_json=bool(args.json)))
        case "dlq":
            return _run(bootstrap.dlq(settings, args))
        case "audit":
            return _run(bootstrap.audit(settings, args))
        case "memory":
            return _run(bootstrap.memory(settings, args))
        case "console":
            if args.console_command == "hash-password":
                from console.passwords import print_password_hash

                return print_password_hash()
            return _run(bootstrap.console(settings, args.host, args.port))
    return ExitCode.USAGE  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":
    sys.exit(main())
