"""What every command group's parsing shares: how a subcommand is described, `--json`, the
argument types, and how a parsed command line becomes its typed command."""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Callable
from typing import Any, Final

from pydantic import TypeAdapter, ValidationError

from contracts import DiscordId
from ltm.processes import Command

__all__ = [
    "Build",
    "UsageProblem",
    "add_command",
    "discord_id",
    "json_flag",
    "on_parsed",
    "parse_shards",
]

HELP_WIDTH: Final = 79

# The typed command of a parsed command line; each leaf parser sets its own.
Build = Callable[[argparse.Namespace], Command]

_JSON_HELP: Final = {
    "list": "print a JSON array, one object per dead letter",
    "replay": "print one JSON object: what was replayed and what failed",
    "purge": "print one JSON object with the number removed",
    "tail": "print each event's JSON body, one a line (JSON lines)",
    "history": "print a JSON array of the revisions, contents whole",
    "restore": "print one JSON object: the memory, its content and the new revision",
    "list_memories": 'print one JSON object: {"server": [...], "personal": {"<user id>": [...]}}',
}


class UsageProblem(ValueError):
    """An argument argparse accepted that the command cannot take: said in one line, exit 2."""


def add_command(group: Any, name: str, summary: str, details: str = "") -> argparse.ArgumentParser:
    """A subcommand whose `--help` starts with the line `ltm --help` lists it with."""
    description = summary[0].upper() + summary[1:] + "."
    if details:
        description += "\n\n" + textwrap.fill(details, HELP_WIDTH)
    parser: argparse.ArgumentParser = group.add_parser(
        name,
        help=summary,
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser


def on_parsed(parser: argparse.ArgumentParser, build: Build) -> None:
    """`build` makes the typed command once `parser`'s command line is parsed."""
    parser.set_defaults(build=build)


def json_flag(parser: argparse.ArgumentParser, action: str) -> None:
    parser.add_argument("--json", dest="as_json", action="store_true", help=_JSON_HELP[action])


def parse_shards(text: str) -> tuple[int, ...]:
    try:
        shards = tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of shard numbers: {text}") from None
    if not shards or min(shards) < 0:
        raise argparse.ArgumentTypeError("give at least one shard number, each >= 0")
    return shards


def discord_id(text: str) -> str:
    try:
        return TypeAdapter(DiscordId).validate_python(text)
    except ValidationError:
        raise argparse.ArgumentTypeError(f"not a Discord id (digits): {text!r}") from None
