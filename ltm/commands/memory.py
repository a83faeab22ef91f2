"""`ltm memory restore|list|changes|revert`: a memory put back as it was before a revision,
the memories a persona sees, as the LLM reads them, the revisions matching a filter, and
every memory they touched put back, printed.

`ltm memory list` text: a header per section, then the section's `ID:<id> …` lines, newest
first; a line break or other control character in a memory is shown escaped (`\\n`), so that
each memory stays one line and nothing in it can drive the terminal. `--json`: one object,
`{"server": [memory, ...], "personal": {"<user id>": [memory, ...]}}`. Exit codes: 0 listed;
3 no such server, or no such persona on it (the message says which); 1 the database could not
be read; 2 usage.

`ltm memory changes` text: one block per revision, newest first: a line of what, when and
by whom, a line of where (server, channel, tool call), then the word diff, removals in
`[-…-]` and additions in `{+…+}`. `ltm memory revert` exit codes: 0 done (also nothing to do),
1 a service away, refused at the question, or the memories changed while it was asked; 2
usage (no filter, no `--reason`, more than 1,000 memories, no terminal to ask on without
`--yes`); 3 no revision matched.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, TextIO

from pydantic import TypeAdapter, ValidationError

from contracts import (
    GLOBAL_LINEAGE,
    DiscordId,
    MemoryListing,
    RevisionFilter,
    UnknownPersona,
    UnknownServer,
)
from infra.settings import Settings
from ltm.commands.common import UsageProblem, add_command, json_flag, run_async
from operators.display import (
    ABSENT,
    ExitCode,
    json_document,
    print_fields,
    shown_content,
    shown_text,
    shown_time,
)

if TYPE_CHECKING:
    from operators.change_store import Change
    from operators.changes import RevertDone
    from operators.revert_plan import RevertPlan
    from operators.revision_store import UnchangedMemory

__all__ = [
    "CHANGES_LIMIT",
    "add",
    "change_fields",
    "changes_and_print",
    "discord_id",
    "list_memories",
    "print_listing",
    "restore_and_print",
    "revert_and_print",
    "utc_time",
]

# Revisions `ltm memory changes` lists unless `--limit` says otherwise.
CHANGES_LIMIT: Final = 100


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
    changes = add_command(
        actions,
        "changes",
        "the revisions matching every filter given, newest first, with word diffs",
        "Times are RFC 3339 or YYYY-MM-DD HH:MM, in UTC; --since is at or after, --until before.",
    )
    _filter_arguments(changes)
    changes.add_argument(
        "--limit",
        type=_positive,
        default=CHANGES_LIMIT,
        metavar="N",
        help=f"at most N revisions (default: {CHANGES_LIMIT})",
    )
    json_flag(changes, "print a JSON array, one object per revision")
    changes.set_defaults(run=_run_changes)
    revert = add_command(
        actions,
        "revert",
        "put back every memory the matching revisions touched",
        "Each memory goes back to what it held before the earliest matching revision of it "
        "(one it created is removed, one it deleted comes back under its id), in one "
        "transaction: a restored revision each, with the reason, its events, and one "
        "operator.memories_reverted record. A memory someone else changed since is skipped "
        "unless --force; one already as it should be is left out. At most 1,000 memories. "
        "Without --yes it shows the plan and asks, on a terminal only.",
    )
    _filter_arguments(revert)
    revert.add_argument(
        "--reason", required=True, metavar="TEXT", help="why (recorded with every revision)"
    )
    revert.add_argument(
        "--operator",
        metavar="NAME",
        help="who reverts: the revisions' actor is operator:NAME (default: the login name)",
    )
    revert.add_argument("--dry-run", action="store_true", help="print the plan and write nothing")
    revert.add_argument(
        "--force", action="store_true", help="revert memories someone else changed since too"
    )
    revert.add_argument("--yes", action="store_true", help="do not ask before writing")
    json_flag(
        revert,
        'print one JSON object: {"dry_run": ..., "reverted": [...], "skipped": [...]}',
    )
    revert.set_defaults(run=_run_revert)


def _filter_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--actor",
        metavar="DISCORD_ID",
        help="made by this actor: the triggerer's id (or console:NAME, operator:NAME)",
    )
    parser.add_argument(
        "--guild",
        type=discord_id,
        metavar="ID",
        help="on this server (a guild's id; a DM's: the user's)",
    )
    parser.add_argument(
        "--channel", type=discord_id, metavar="ID", help="by a tool call from this channel"
    )
    parser.add_argument("--tool-call", metavar="ID", help="by this tool call")
    parser.add_argument("--since", type=utc_time, metavar="TIME", help="at or after TIME")
    parser.add_argument("--until", type=utc_time, metavar="TIME", help="before TIME")


def _revision_filter(args: argparse.Namespace) -> RevisionFilter:
    return RevisionFilter(
        actor_disc_id=args.actor,
        guild_id=args.guild,
        channel_id=args.channel,
        tool_call_id=args.tool_call,
        since=args.since,
        until=args.until,
    )


def utc_time(text: str) -> datetime:
    """`--since`, `--until`: RFC 3339, or `YYYY-MM-DD HH:MM` (UTC)."""
    from operators.revision_filter import BadRevisionFilter, parse_time

    try:
        return parse_time(text)
    except BadRevisionFilter as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"not a positive number: {text!r}")
    return int(text)


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


def _run_changes(args: argparse.Namespace, settings: Settings) -> int:
    return run_async(
        changes_and_print(settings, _revision_filter(args), limit=args.limit, as_json=args.as_json)
    )


def _run_revert(args: argparse.Namespace, settings: Settings) -> int:
    revisions = _revision_filter(args)
    if revisions == RevisionFilter():
        raise UsageProblem(
            "ltm memory revert: give at least one filter (--actor, --guild, --channel, "
            "--tool-call, --since, --until)"
        )
    if not args.reason.strip():
        raise UsageProblem("ltm memory revert: --reason must say why")
    from console.core.sessions import operator_name

    name = operator_name(args.operator if args.operator is not None else getpass.getuser())
    if name is None:
        raise UsageProblem(
            "ltm memory revert: --operator NAME: 1 to 40 letters, digits, '.', '_' or '-'"
        )
    if not (args.dry_run or args.yes or sys.stdin.isatty()):
        raise UsageProblem(
            "ltm memory revert: no terminal to ask on: pass --yes to revert without asking "
            "(--dry-run shows what it would do)"
        )
    return run_async(
        revert_and_print(
            settings,
            revisions,
            reason=args.reason.strip(),
            actor=f"operator:{name}",
            dry_run=args.dry_run,
            force=args.force,
            ask=not args.yes,
            as_json=args.as_json,
        )
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


def _marked_diff(before: str | None, after: str | None) -> str:
    # Imported when used: `ltm worker` loads none of the operators' code.
    from operators.word_diff import marked_diff, word_diff

    return marked_diff(word_diff(before, after))


def change_fields(change: Change) -> dict[str, Any]:
    """One revision of `ltm memory changes --json`."""
    revision = change.revision
    return {
        "revision_id": revision.revision_id,
        "memory_id": revision.memory_id,
        "scope": revision.scope,
        "action": revision.action,
        "actor_disc_id": revision.actor_disc_id,
        "occurred_at": revision.occurred_at,
        "tool_call_id": revision.tool_call_id,
        "guild_id": change.guild_id,
        "channel_id": change.channel_id,
        "content_before": revision.content_before,
        "content_after": revision.content_after,
        "diff": _marked_diff(revision.content_before, revision.content_after),
    }


def _print_change(change: Change, out: TextIO) -> None:
    revision = change.revision
    print(
        f"revision {revision.revision_id}  {revision.action}  memory {revision.memory_id} "
        f"({revision.scope})  {shown_time(revision.occurred_at)}  "
        f"by {shown_text(revision.actor_disc_id)}",
        file=out,
    )
    print(
        f"  guild {change.guild_id or ABSENT}  channel {change.channel_id or ABSENT}  "
        f"tool call {shown_text(revision.tool_call_id)}",
        file=out,
    )
    diff = _marked_diff(revision.content_before, revision.content_after)
    print(f"  {shown_text(diff) or '(no text)'}", file=out)


async def changes_and_print(
    settings: Settings,
    revisions: RevisionFilter,
    *,
    limit: int = CHANGES_LIMIT,
    as_json: bool = False,
    out: TextIO | None = None,
) -> int:
    """`ltm memory changes FILTERS`: exit code 0, also when nothing matches."""
    from operators.changes import list_changes

    out = out or sys.stdout
    found = await list_changes(settings, revisions, limit=limit)
    if as_json:
        print(json_document([change_fields(change) for change in found]), file=out)
        return ExitCode.OK
    for index, change in enumerate(found):
        if index:
            print(file=out)
        _print_change(change, out)
    shown = f"{len(found)} revision(s)" if found else "no revision matches"
    more = f" (the newest {limit}: --limit for more)" if len(found) == limit else ""
    print(f"{chr(10) if found else ''}{shown}{more}", file=out)
    return ExitCode.OK


def _print_plan(plan: RevertPlan, done: RevertDone | None, out: TextIO) -> None:
    new_revisions = [] if done is None else [r.revision.revision_id for r in done.restored]
    for index, step in enumerate(plan.reverts):
        verb = "reverted" if done else "would revert"
        new = f", new revision {new_revisions[index]}" if done else ""
        print(
            f"{verb} memory {step.memory_id} ({step.scope}) as before revision "
            f"{step.undone.revision_id}{new}",
            file=out,
        )
        print(f"  {shown_text(_marked_diff(step.before, step.after))}", file=out)
    for skipped in plan.skipped:
        print(f"skipped memory {skipped.memory_id} ({skipped.scope}): {skipped.why}", file=out)
    left = plan.touched - len(plan.reverts) - len(plan.skipped)
    already = f", {left} already as before" if left else ""
    summary = "reverted" if done else "would revert"
    print(
        f"{summary} {len(plan.reverts)} memory(ies), skipped {len(plan.skipped)}{already}",
        file=out,
    )


def _plan_document(plan: RevertPlan, done: RevertDone | None) -> dict[str, Any]:
    new_revisions: list[int | None] = (
        [None] * len(plan.reverts)
        if done is None
        else [restored.revision.revision_id for restored in done.restored]
    )
    return {
        "dry_run": done is None,
        "reverted": [
            {
                "memory_id": step.memory_id,
                "scope": step.scope,
                "before": step.before,
                "after": step.after,
                "revision_id": revision_id,
            }
            for step, revision_id in zip(plan.reverts, new_revisions, strict=True)
        ],
        "skipped": [
            {"memory_id": s.memory_id, "scope": s.scope, "why": s.why} for s in plan.skipped
        ],
    }


async def revert_and_print(
    settings: Settings,
    revisions: RevisionFilter,
    *,
    reason: str,
    actor: str,
    dry_run: bool = False,
    force: bool = False,
    ask: bool = False,
    as_json: bool = False,
    out: TextIO | None = None,
    err: TextIO | None = None,
    stdin: TextIO | None = None,
) -> int:
    """`ltm memory revert FILTERS --reason TEXT`: the plan (`dry_run`), or the revert, after
    showing the plan and asking on `stdin` when `ask`; exit codes as the module says."""
    from operators.changes import PlanChanged, planned_revert, revert
    from operators.revert_plan import TooManyMemories

    out, err, reader = out or sys.stdout, err or sys.stderr, stdin or sys.stdin
    # With --json stdout holds the JSON alone: the plan asked about and the question go to
    # stderr.
    notes = err if as_json else out
    try:
        if dry_run or ask:
            plan = await planned_revert(settings, revisions, force=force)
            if plan.touched == 0:
                print("ltm memory revert: no revision matches the filter", file=err)
                return ExitCode.NOT_FOUND
            if dry_run or not plan.reverts:
                _show(plan, None, as_json=as_json, out=out)
                return ExitCode.OK
            _print_plan(plan, None, notes)
            print(f"revert {len(plan.reverts)} memory(ies)? [y/N] ", end="", file=notes)
            notes.flush()
            answer = await asyncio.to_thread(reader.readline)
            if answer.strip().lower() not in ("y", "yes"):
                print("nothing reverted", file=notes)
                return ExitCode.FAILED
        done = await revert(
            settings,
            revisions,
            reason=reason,
            actor=actor,
            force=force,
            approved=plan.fingerprint if ask else None,
        )
    except TooManyMemories as error:
        print(f"ltm memory revert: {error}", file=err)
        return ExitCode.USAGE
    except PlanChanged as error:
        print(f"ltm memory revert: {error}; run it again to see the new plan", file=err)
        return ExitCode.FAILED
    if done.plan.touched == 0:
        print("ltm memory revert: no revision matches the filter", file=err)
        return ExitCode.NOT_FOUND
    _show(done.plan, done, as_json=as_json, out=out)
    return ExitCode.OK


def _show(plan: RevertPlan, done: RevertDone | None, *, as_json: bool, out: TextIO) -> None:
    if as_json:
        print(json_document(_plan_document(plan, done)), file=out)
    else:
        _print_plan(plan, done, out)
