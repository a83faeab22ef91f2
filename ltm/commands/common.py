"""What every command group shares: how a subcommand is described, `--json`, what a leaf
command runs (`Run`), the refusal of an argument argparse let through, and the event loop an
asynchronous command runs on."""

from __future__ import annotations

import argparse
import asyncio
import textwrap
from collections.abc import Callable, Coroutine
from typing import Any, Final

from infra.settings import Settings

__all__ = ["Run", "UsageProblem", "add_command", "json_flag", "run_async"]

HELP_WIDTH: Final = 79

# What a leaf command runs once its command line is parsed (argparse's `run` default): its
# exit code.
Run = Callable[[argparse.Namespace, Settings], int]


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


def json_flag(parser: argparse.ArgumentParser, shape: str) -> None:
    """`--json`; `shape` says what it prints instead of the text."""
    parser.add_argument("--json", dest="as_json", action="store_true", help=shape)


def run_async(coroutine: Coroutine[Any, Any, int]) -> int:
    """Runs an asynchronous command to its end, on uvloop where there is one."""
    try:
        import uvloop

        return uvloop.run(coroutine)
    except ImportError:  # pragma: no cover - uvloop is not on every platform
        return asyncio.run(coroutine)
