"""`ltm memory list`: the memories a persona sees, as the LLM reads them.

Text: a header per section, then the section's `ID:<id> …` lines, newest first; a line break
or other control character in a memory is shown escaped (`\\n`), so that each memory stays
one line and nothing in it can drive the terminal. `--json`: one object,
`{"server": [memory, ...], "personal": {"<user id>": [memory, ...]}}`.

Exit codes: 0 listed; 3 no such server, or no such persona on it (the message says which);
1 the database could not be read; 2 usage.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Final, TextIO

from contracts import GLOBAL_LINEAGE, MemoryListing, UnknownPersona, UnknownServer
from infra.settings import Settings
from operators.engines import one_shot_engine
from operators.memory_listing import persona_listing
from worker.ops.commands import ListMemories
from worker.ops.output import ExitCode

__all__ = ["list_memories", "print_listing"]


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
    command: ListMemories,
    *,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
) -> int:
    try:
        async with one_shot_engine(settings) as engine:
            found = await persona_listing(
                engine, command.guild, command.persona_id, command.user_ids
            )
    except (UnknownServer, UnknownPersona) as error:
        print(f"ltm memory list: {error}", file=err)
        return ExitCode.NOT_FOUND
    if command.as_json:
        print(found.listing.model_dump_json(), file=out)
    else:
        print_listing(
            found.listing,
            server_disc_id=command.guild,
            persona_id=command.persona_id,
            lineage=found.lineage,
            out=out,
        )
    return ExitCode.OK
