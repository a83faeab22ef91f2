"""`ltm memory restore|list`."""

from __future__ import annotations

import argparse
from typing import Any

from ltm.arguments.common import add_command, discord_id, json_flag, on_parsed
from worker.ops.commands import ListMemories, RestoreRevision

__all__ = ["add_memory"]


def add_memory(commands: Any) -> None:
    memory = add_command(commands, "memory", "read memories, or change them by hand")
    actions = memory.add_subparsers(
        dest="memory_command", required=True, metavar="ACTION", title="actions"
    )
    restore = add_command(
        actions,
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
    json_flag(restore, "restore")
    on_parsed(restore, _restore_revision)
    _add_list(actions)


def _restore_revision(args: argparse.Namespace) -> RestoreRevision:
    return RestoreRevision(revision_id=args.revision_id, actor=args.actor, as_json=args.as_json)


def _add_list(actions: Any) -> None:
    listing = add_command(
        actions,
        "list",
        "the memories a persona sees, as the LLM reads them",
        "The server memories of the server and the persona's lineage, then each named user's "
        "personal memories of that lineage and of the global lineage 0, newest first, one "
        "`ID:<id> <content>` line each.",
    )
    listing.add_argument(
        "--guild",
        type=discord_id,
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
        type=discord_id,
        action="append",
        default=[],
        metavar="USER_ID",
        help="also this user's personal memories (repeatable)",
    )
    json_flag(listing, "list_memories")
    on_parsed(listing, _list_memories)


def _list_memories(args: argparse.Namespace) -> ListMemories:
    return ListMemories(
        guild=args.guild,
        persona_id=args.persona,
        user_ids=tuple(args.users),
        as_json=args.as_json,
    )
