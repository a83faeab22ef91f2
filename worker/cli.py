"""`ltm`: the one console script. Thin: it parses, then hands over to the composition root."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any

import psycopg
import sqlalchemy.exc
from pydantic import TypeAdapter, ValidationError

from contracts import DiscordId
from infra.logs import configure_logging
from infra.settings import Settings

__all__ = ["main"]


def _parse_shards(text: str) -> tuple[int, ...]:
    try:
        shards = tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of shard numbers: {text!r}") from None
    if not shards or min(shards) < 0:
        raise argparse.ArgumentTypeError("give at least one shard number, each >= 0")
    return shards


def _discord_id(text: str) -> str:
    try:
        return TypeAdapter(DiscordId).validate_python(text)
    except ValidationError:
        raise argparse.ArgumentTypeError(f"not a Discord id (digits): {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ltm", description="Long-term-memory update service.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    commands.add_parser("migrate", help="create the database if needed and upgrade its schema")
    commands.add_parser("topology", help="declare the exchanges and queues")
    commands.add_parser("worker", help="run the worker until SIGTERM or SIGINT")

    gateway = commands.add_parser("gateway", help="run a gateway process for some shards")
    gateway.add_argument("--shards", type=_parse_shards, required=True, help="e.g. 0,1")
    gateway.add_argument("--shard-count", type=int, required=True)

    call = commands.add_parser("call", help="publish one tool call and print its result")
    call.add_argument("--json", dest="json_file", type=Path, required=True, help="FILE or -")
    call.add_argument("--timeout", type=float, default=30.0)

    dlq = commands.add_parser("dlq", help="the dead-letter queue")
    dlq_commands = dlq.add_subparsers(dest="dlq_command", required=True, metavar="ACTION")
    dlq_commands.add_parser("list", help="show dead-lettered calls (nothing is consumed)")
    replay = dlq_commands.add_parser("replay", help="send calls back to the worker")
    which = replay.add_mutually_exclusive_group(required=True)
    which.add_argument("--all", action="store_true")
    which.add_argument("--id", dest="event_id")
    purge = dlq_commands.add_parser("purge", help="empty the dead-letter queue")
    purge.add_argument("--yes", action="store_true", help="do not ask for confirmation")

    audit = commands.add_parser("audit", help="the memory event stream and revisions")
    audit_commands = audit.add_subparsers(dest="audit_command", required=True, metavar="ACTION")
    tail = audit_commands.add_parser("tail", help="print the audit stream from an offset")
    tail.add_argument("--from", dest="start", default="first", help="first, last or a time")
    tail.add_argument("--follow", action="store_true")
    tail.add_argument("--json", dest="as_json", action="store_true")
    history = audit_commands.add_parser("history", help="a memory's revisions, oldest first")
    history.add_argument("memory_id", type=int)

    memory = commands.add_parser("memory", help="memories")
    memory_commands = memory.add_subparsers(dest="memory_command", required=True, metavar="ACTION")
    restore = memory_commands.add_parser("restore", help="put a memory back as before a revision")
    restore.add_argument("revision_id", type=int)
    restore.add_argument("--actor", default="cli")
    listing = memory_commands.add_parser("list", help="the memories a persona sees, as lines")
    listing.add_argument(
        "--guild",
        type=_discord_id,
        required=True,
        metavar="ID",
        help="the guild's (a DM: the user's)",
    )
    listing.add_argument("--persona", type=int, required=True, metavar="PERSONA_ID")
    listing.add_argument(
        "--user",
        dest="users",
        type=_discord_id,
        action="append",
        default=[],
        metavar="USER_ID",
        help="also this user's personal memories (repeatable)",
    )
    listing.add_argument("--json", dest="as_json", action="store_true", help="one JSON object")
    return parser


def _run(coroutine: Coroutine[Any, Any, int]) -> int:
    try:
        import uvloop

        return uvloop.run(coroutine)
    except ImportError:  # pragma: no cover - uvloop is not on every platform
        return asyncio.run(coroutine)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    settings = Settings()
    configure_logging(settings.log_level, settings.log_format)
    try:
        return _dispatch(args, settings)
    except (OSError, psycopg.OperationalError, sqlalchemy.exc.OperationalError) as error:
        # A broker or database that does not answer, a file that is not there: one line.
        print(f"ltm {args.command}: {type(error).__name__}: {error}", file=sys.stderr)
        return 1


def _dispatch(args: argparse.Namespace, settings: Settings) -> int:
    from worker import bootstrap

    match args.command:
        case "migrate":
            from infra.database import migrate

            migrate(settings.database_url)
            print("database schema is up to date")
            return 0
        case "topology":
            return _run(bootstrap.declare_topology(settings))
        case "worker":
            return _run(bootstrap.run_worker(settings))
        case "gateway":
            return _run(bootstrap.run_gateway(settings, args.shards, args.shard_count))
        case "call":
            path = str(args.json_file)
            body = sys.stdin.buffer.read() if path == "-" else args.json_file.read_bytes()
            return _run(bootstrap.call(settings, body, args.timeout))
        case "dlq":
            return _run(bootstrap.dlq(settings, args))
        case "audit":
            return _run(bootstrap.audit(settings, args))
        case "memory":
            return _run(bootstrap.memory(settings, args))
    return 2  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":
    sys.exit(main())
