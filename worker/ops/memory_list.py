"""`ltm memory list`: the memories a persona sees, as the LLM reads them.

Text: a header per section, then the section's `ID:<id> …` lines, newest first; a line break
or other control character in a memory is shown escaped (`\\n`), so that each memory stays
one line and nothing in it can drive the terminal. `--json`: one object,
`{"server": [memory, ...], "personal": {"<user id>": [memory, ...]}}`.

Exit codes: 0 listed; 3 no such server, or no such persona on it (the message says which);
1 the database could not be read; 2 usage.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Final, TextIO

from contracts import GLOBAL_LINEAGE, MemoryListing, UnknownPersona, UnknownServer
from infra.memories import MemoryQueries
from infra.settings import Settings
from worker.adapters.database import create_engine

__all__ = ["NOT_FOUND", "list_memories", "print_listing", "run_command"]

NOT_FOUND: Final = 3


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
    server_disc_id: str,
    persona_id: int,
    user_ids: Sequence[str] = (),
    *,
    as_json: bool = False,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
) -> int:
    engine = create_engine(settings.sqlalchemy_url, pool_size=1)
    try:
        queries = MemoryQueries(engine)
        server = await queries.server(server_disc_id)
        if server is None:
            raise UnknownServer(server_disc_id)
        lineage = server.lineage_of(persona_id)
        listing = server.listing(persona_id, await queries.personal(user_ids))
    except (UnknownServer, UnknownPersona) as error:
        print(f"ltm memory list: {error}", file=err)
        return NOT_FOUND
    finally:
        await engine.dispose()
    if as_json:
        print(listing.model_dump_json(), file=out)
    else:
        print_listing(
            listing, server_disc_id=server_disc_id, persona_id=persona_id, lineage=lineage, out=out
        )
    return 0


async def run_command(settings: Settings, args: argparse.Namespace) -> int:
    return await list_memories(settings, args.guild, args.persona, args.users, as_json=args.as_json)
