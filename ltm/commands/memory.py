"""`ltm memory restore|list`: a memory put back as it was before a revision, and the
memories a persona sees, as the LLM reads them, printed.

`ltm memory list` text: a header per section, then the section's `ID:<id> …` lines, newest
first; a line break or other control character in a memory is shown escaped (`\\n`), so that
each memory stays one line and nothing in it can drive the terminal. `--json`: one object,
`{"server": [memory, ...], "personal": {"<user id>": [memory, ...]}}`. Exit codes: 0 listed;
3 no such server, or no such persona on it (the message says which); 1 the database could not
be read; 2 usage.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, TextIO

from pydantic import TypeAdapter, ValidationError

from contracts import GLOBAL_LINEAGE, DiscordId, MemoryListing, UnknownPersona, UnknownServer
from infra.settings import Settings
from ltm.commands.common import add_command, json_flag, run_async
from operators.display import ExitCode, json_document, print_fields, shown_content

if TYPE_CHECKING:
    from operators.revision_store import UnchangedMemory

__all__ = ["add", "discord_id", "list_memories", "print_listing", "restore_and_print"]


def add(commands: Any) -> None:
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
    json_flag(restore, "print one JSON object: the memory, its content and the new revision")
    restore.set_defaults(run=_run_restore)
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
    json_flag(listing, 'print one JSON object: {"server": [...], "personal": {"<user id>": [...]}}')
    listing.set_defaults(run=_run_list)


def discord_id(text: str) -> str:
    """`--guild`, `--user`: a Discord id (digits)."""
    try:
        return TypeAdapter(DiscordId).validate_python(text)
    except ValidationError:
        raise argparse.ArgumentTypeError(f"not a Discord id (digits): {text!r}") from None


def _run_restore(args: argparse.Namespace, settings: Settings) -> int:
    return run_async(
        restore_and_print(settings, args.revision_id, actor=args.actor, as_json=args.as_json)
    )


def _run_list(args: argparse.Namespace, settings: Settings) -> int:
    return run_async(
        list_memories(settings, args.guild, args.persona, tuple(args.users), as_json=args.as_json)
    )


async def restore_and_print(
    settings: Settings,
    revision_id: int,
    *,
    actor: str = "cli",
    as_json: bool = False,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """`ltm memory restore REVISION`: `restore_revision` as `actor`, printed.

    Exit code 0 (also when there was nothing to change); 3 when there is no such revision.
    """
    # Imported when used: `ltm worker` loads none of the operators' code.
    from operators.revision_store import UnchangedMemory
    from operators.revisions import restore_revision

    out, err = out or sys.stdout, err or sys.stderr
    restored = await restore_revision(settings, revision_id, actor=actor)
    if restored is None:
        print(f"ltm memory restore: no revision {revision_id}", file=err)
        return ExitCode.NOT_FOUND
    if isinstance(restored, UnchangedMemory):
        _print_unchanged(restored, revision_id, as_json=as_json, out=out)
        return ExitCode.OK
    revision = restored.revision
    if as_json:
        restored_fields = {
            "memory_id": revision.memory_id,
            "scope": revision.scope,
            "restored_before_revision": revision_id,
            "revision_id": revision.revision_id,
            "tool_call_id": revision.tool_call_id,
            "content": revision.content_after,
            "changed": True,
        }
        print(json_document(restored_fields), file=out)
    else:
        print_fields(
            [
                ("memory", f"{revision.memory_id} ({revision.scope})"),
                ("restored as before revision", str(revision_id)),
                ("new revision", str(revision.revision_id)),
                ("content", shown_content(revision.content_after, width=None)),
            ],
            out,
        )
    return ExitCode.OK


def _print_unchanged(
    unchanged: UnchangedMemory, revision_id: int, *, as_json: bool, out: TextIO
) -> None:
    """A restore that found the memory as it was before the revision: it says so."""
    if as_json:
        fields = {
            "memory_id": unchanged.memory_id,
            "restored_before_revision": revision_id,
            "content": unchanged.content,
            "changed": False,
        }
        print(json_document(fields), file=out)
        return
    print_fields(
        [
            ("memory", str(unchanged.memory_id)),
            ("already as before revision", str(revision_id)),
            (
                "content",
                "(does not exist)"
                if unchanged.content is None
                else shown_content(unchanged.content, width=None),
            ),
            ("changed", "nothing: no revision, no event"),
        ],
        out,
    )


# C0 and C1 control characters and DEL, the usual ones by their names.
_ESCAPES: Final = {
    **{code: f"\\x{code:02x}" for code in (*range(0x20), *range(0x7F, 0xA0))},
    ord("\n"): "\\n",
    ord("\r"): "\\r",
    ord("\t"): "\\t",
}


def _on_one_line(line: str) -> str:
    return line.translate(_ESCAPES)


def _count(lines: Sequence[str]) -> str:
    return str(len(lines)) if lines else "none"


def print_listing(
    listing: MemoryListing,
    *,
    server_disc_id: str,
    persona_id: int,
    lineage: int,
    out: TextIO = sys.stdout,
) -> None:
    """The text form: the server's section, then one section per person, in the order named."""
    lines = listing.server_lines()
    print(
        f"Server memories of {server_disc_id}, persona {persona_id} (lineage {lineage}): "
        f"{_count(lines)}",
        file=out,
    )
    for line in lines:
        print(_on_one_line(line), file=out)
    for user_id in listing.personal:
        lines = listing.personal_lines(user_id)
        print(
            f"\nPersonal memories of {user_id} (lineage {lineage} and global {GLOBAL_LINEAGE}): "
            f"{_count(lines)}",
            file=out,
        )
        for line in lines:
            print(_on_one_line(line), file=out)


async def list_memories(
    settings: Settings,
    guild: str,
    persona_id: int,
    user_ids: Sequence[str] = (),
    *,
    as_json: bool = False,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
) -> int:
    """The memories of the persona on `guild` (the server's key: a guild, or the user of a
    DM), and the personal ones of `user_ids`."""
    from operators.engines import one_shot_engine
    from operators.memory_listing import persona_listing

    try:
        async with one_shot_engine(settings) as engine:
            found = await persona_listing(engine, guild, persona_id, user_ids)
    except (UnknownServer, UnknownPersona) as error:
        print(f"ltm memory list: {error}", file=err)
        return ExitCode.NOT_FOUND
    if as_json:
        print(found.listing.model_dump_json(), file=out)
    else:
        print_listing(
            found.listing,
            server_disc_id=guild,
            persona_id=persona_id,
            lineage=found.lineage,
            out=out,
        )
    return ExitCode.OK
