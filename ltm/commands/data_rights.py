"""`ltm user export|forget`, `ltm server forget`, `ltm data-requests list|replay`: a person's
or a server's data exported or erased through the worker, as a bot's request would be, and
the requests answered so far.

`--json`: `user export` prints the document itself, nothing around it; `forget` prints the
`data_request.completed` body; `data-requests list` a list of objects keyed by column name.
Exit codes: 0 done; 1 a service away (the broker, the database, or no answer in time); 2
usage (a missing `--reason` too); 3 refused.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, TextIO

import aiormq
import orjson
from aio_pika.exceptions import ChannelNotFoundEntity
from sqlalchemy.exc import SQLAlchemyError

from contracts.data_requests import Subject
from infra.settings import Settings
from ltm.commands.common import add_command, json_flag, run_async
from ltm.commands.memory import discord_id
from operators.display import ExitCode, json_document, print_fields, print_table, shown_time

if TYPE_CHECKING:
    from contracts import DataRequestCompleted, DataRequestRequested

__all__ = ["REFUSED", "add", "ask_and_print", "list_and_print", "replay_and_print"]

# A request the worker refused (the reason is printed).
REFUSED: Final = 3
_TIMEOUT_S: Final = 60.0


def add(commands: Any) -> None:
    _add_user(commands)
    _add_server(commands)
    _add_data_requests(commands)


def _timeout(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--timeout",
        type=float,
        default=_TIMEOUT_S,
        metavar="S",
        help=f"how long to wait for the answer, in seconds (default: {_TIMEOUT_S:g})",
    )


def _reason(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--reason", required=True, metavar="TEXT", help="why (kept with the request's row)"
    )


def _add_user(commands: Any) -> None:
    user = add_command(commands, "user", "export or erase what is held about a user")
    actions = user.add_subparsers(
        dest="user_command", required=True, metavar="ACTION", title="actions"
    )
    export = add_command(
        actions,
        "export",
        "print everything held about a user",
        "The worker reads the user's row, memberships, personal memories with their revisions, "
        "the server memories they taught and how many tool calls they triggered; nothing "
        "about anyone else.",
    )
    export.add_argument("user_id", type=discord_id, metavar="ID", help="the user's Discord id")
    json_flag(export, "print the document itself, nothing around it")
    _timeout(export)
    export.set_defaults(run=_run_export)
    forget = add_command(
        actions,
        "forget",
        "erase a user from every store",
        "Personal memories deleted, their revisions redacted, the user's tool-call records "
        "and outbox rows, dead letters and notices forgotten (docs/data-rights.md).",
    )
    forget.add_argument("user_id", type=discord_id, metavar="ID", help="the user's Discord id")
    _reason(forget)
    forget.add_argument(
        "--strict", action="store_true", help="delete the server memories they taught too"
    )
    forget.add_argument(
        "--keep-learning",
        action="store_true",
        help="leave their privacy level as it is (by default 2: nothing personal is learned)",
    )
    forget.add_argument(
        "--deleted-account",
        action="store_true",
        help="the Discord account no longer exists: its users row goes too",
    )
    json_flag(forget, "print the data_request.completed body")
    _timeout(forget)
    forget.set_defaults(run=_run_forget_user)


def _add_server(commands: Any) -> None:
    server = add_command(commands, "server", "erase what is held about a server")
    actions = server.add_subparsers(
        dest="server_command", required=True, metavar="ACTION", title="actions"
    )
    forget = add_command(
        actions,
        "forget",
        "erase a server from every store",
        "Its server memories deleted in every lineage and their revisions redacted; its "
        "configuration, members and exclusions deleted; its calls' records redacted; its dead "
        "letters removed; its notices retracted. Personal memories stay their users'.",
    )
    forget.add_argument("guild_id", type=discord_id, metavar="GUILD_ID", help="the guild's id")
    _reason(forget)
    json_flag(forget, "print the data_request.completed body")
    _timeout(forget)
    forget.set_defaults(run=_run_forget_server)


def _add_data_requests(commands: Any) -> None:
    group = add_command(commands, "data-requests", "the data requests answered, and replays")
    actions = group.add_subparsers(
        dest="data_requests_command", required=True, metavar="ACTION", title="actions"
    )
    listing = add_command(actions, "list", "the rows of data_requests, newest first")
    json_flag(listing, "print a list of objects keyed by column name")
    listing.set_defaults(run=_run_list)
    replay = add_command(
        actions,
        "replay",
        "run again every erasure answered since a time",
        "After a backup taken before them was restored: the erasures the audit stream "
        "records since TIME are asked again, under their own ids.",
    )
    replay.add_argument(
        "--since",
        required=True,
        type=_time,
        metavar="TIME",
        help="an RFC 3339 time, or YYYY-MM-DD[ HH:MM[:SS]] (UTC)",
    )
    _timeout(replay)
    replay.set_defaults(run=_run_replay)


def _time(text: str) -> datetime:
    from operators.audit_stream import BadStart, parse_start

    try:
        start = parse_start(text)
    except BadStart as error:
        raise argparse.ArgumentTypeError(str(error).replace("--from", "--since")) from None
    if not isinstance(start, datetime):
        raise argparse.ArgumentTypeError(f"--since must be a time, not {text}")
    return start


def _operator() -> str:
    """Who asks, as the request records it: the login name here."""
    return f"cli:{getpass.getuser()}"


def _run_export(args: argparse.Namespace, settings: Settings) -> int:
    from operators.data_requests import operator_request

    request = operator_request("export", Subject(user_id=args.user_id), _operator())
    return run_async(ask_and_print(settings, request, timeout=args.timeout, as_json=args.as_json))


def _run_forget_user(args: argparse.Namespace, settings: Settings) -> int:
    from operators.data_requests import operator_request

    request = operator_request(
        "erase",
        Subject(user_id=args.user_id),
        _operator(),
        strict=args.strict,
        keep_learning=args.keep_learning,
        deleted_account=args.deleted_account,
        stated_reason=args.reason,
    )
    return run_async(ask_and_print(settings, request, timeout=args.timeout, as_json=args.as_json))


def _run_forget_server(args: argparse.Namespace, settings: Settings) -> int:
    from operators.data_requests import operator_request

    request = operator_request(
        "erase", Subject(guild_id=args.guild_id), _operator(), stated_reason=args.reason
    )
    return run_async(ask_and_print(settings, request, timeout=args.timeout, as_json=args.as_json))


def _run_list(args: argparse.Namespace, settings: Settings) -> int:
    return run_async(list_and_print(settings, as_json=args.as_json))


def _run_replay(args: argparse.Namespace, settings: Settings) -> int:
    return run_async(replay_and_print(settings, args.since, timeout=args.timeout))


async def ask_and_print(
    settings: Settings,
    request: DataRequestRequested,
    *,
    timeout: float,
    as_json: bool,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Publishes the request, waits for its answer and prints it."""
    from operators.data_requests import request_data
    from operators.tool_call import Unroutable

    out, err = out or sys.stdout, err or sys.stderr
    command = "ltm user" if request.subject.kind == "user" else "ltm server"
    try:
        answer = await request_data(settings, request, timeout=timeout)
    except Unroutable:
        print(f"{command}: no queue is bound for data_request: run `ltm topology`", file=err)
        return ExitCode.FAILED
    except TimeoutError:
        print(
            f"{command}: request {request.request_id} was queued but no answer came within "
            f"{timeout:g} s (is a worker running?)",
            file=err,
        )
        return ExitCode.FAILED
    except ChannelNotFoundEntity as error:
        print(f"{command}: {error.args[-1]}: run `ltm topology` first", file=err)
        return ExitCode.FAILED
    except (OSError, aiormq.exceptions.AMQPError) as error:
        print(f"{command}: the broker is unreachable: {error!r}", file=err)
        return ExitCode.FAILED
    print_answer(answer, as_json=as_json, out=out)
    return ExitCode.OK if answer.status == "done" else REFUSED


def print_answer(answer: DataRequestCompleted, *, as_json: bool, out: TextIO) -> None:
    body = orjson.loads(answer.model_dump_json())
    if as_json:
        # An export's --json is the document itself.
        print(json_document(body["document"] if answer.document is not None else body), file=out)
        return
    fields = [
        ("request", answer.request_id),
        ("kind", answer.kind),
        ("subject", f"{answer.subject.kind} {answer.subject.id}"),
        ("status", answer.status),
    ]
    if answer.reason is not None:
        fields.append(("reason", answer.reason))
    if answer.receipt is not None:
        fields += [
            (name.replace("_", " "), str(count))
            for name, count in answer.receipt.model_dump().items()
        ]
    print_fields(fields, out)
    if answer.document is not None:
        print(json_document(body["document"]), file=out)


async def list_and_print(
    settings: Settings, *, as_json: bool, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    from operators.data_requests import list_data_requests

    out, err = out or sys.stdout, err or sys.stderr
    try:
        rows, retract_errors = await list_data_requests(settings)
    except (OSError, SQLAlchemyError) as error:
        print(f"ltm data-requests list: the database is unreachable: {error!r}", file=err)
        return ExitCode.FAILED
    if as_json:
        print(json_document(rows), file=out)
        return ExitCode.OK
    print_table(
        ("RECEIVED", "REQUEST", "KIND", "SUBJECT", "BY", "STATUS", "RECEIPT"),
        (
            (
                shown_time(row["received_at"]),
                row["request_id"],
                row["kind"],
                f"{row['subject_kind']} {row['subject_id']}",
                f"{row['requested_by_kind']} {row['requested_by_id']}",
                row["status"] if row["reason"] is None else f"{row['status']} ({row['reason']})",
                _receipt_text(row["receipt"]),
            )
            for row in rows
        ),
        out,
    )
    for notice in retract_errors:
        print(
            f"notice {notice.channel_id}/{notice.message_id} about memory {notice.memory_id}: "
            f"not retracted ({notice.retract_error})",
            file=out,
        )
    return ExitCode.OK


def _receipt_text(receipt: dict[str, int] | None) -> str:
    if not receipt:
        return "-"
    return " ".join(f"{name}={count}" for name, count in receipt.items() if count) or "nothing"


async def replay_and_print(
    settings: Settings, since: datetime, *, timeout: float, out: TextIO | None = None
) -> int:
    from operators.data_requests import erasures_since

    out = out or sys.stdout
    requests = await erasures_since(settings, since)
    worst: int = ExitCode.OK
    for request in requests:
        code = await ask_and_print(settings, request, timeout=timeout, as_json=False, out=out)
        worst = max(worst, code)
    print(f"{len(requests)} erasure(s) since {shown_time(since)} asked again", file=out)
    return int(worst)
