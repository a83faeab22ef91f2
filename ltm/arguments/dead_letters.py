"""`ltm dlq list|replay|purge`."""

from __future__ import annotations

from typing import Any

from ltm.arguments.common import add_command, json_flag, on_parsed
from worker.ops.commands import ListDeadLetters, PurgeDeadLetters, ReplayDeadLetters

__all__ = ["add_dlq"]


def add_dlq(commands: Any) -> None:
    dlq = add_command(
        commands,
        "dlq",
        "the dead-letter queue: calls the worker or the broker gave up on",
        "Each keeps its body, routing key and properties, with why and when it was given up on.",
    )
    actions = dlq.add_subparsers(
        dest="dlq_command", required=True, metavar="ACTION", title="actions"
    )
    listing = add_command(
        actions,
        "list",
        "show the dead-lettered calls (nothing is consumed)",
        "At most the first 10,000. Each is handed back to the queue when the listing ends.",
    )
    json_flag(listing, "list")
    on_parsed(listing, lambda args: ListDeadLetters(as_json=args.as_json))
    _add_replay(actions)
    purge = add_command(actions, "purge", "remove every dead-lettered call")
    purge.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    json_flag(purge, "purge")
    on_parsed(purge, lambda args: PurgeDeadLetters(yes=args.yes, as_json=args.as_json))


def _add_replay(actions: Any) -> None:
    replay = add_command(
        actions,
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
    json_flag(replay, "replay")
    # argparse lets exactly one of --all and --id through: no id means every dead letter.
    on_parsed(replay, lambda args: ReplayDeadLetters(event_id=args.event_id, as_json=args.as_json))
