"""The `ltm` command line: every command group, in the order `ltm --help` lists them.

Each group is one module: its options (`add`, which gives each leaf parser the `run` it runs
once parsed), what it runs, and what it prints. A new command goes in its group's module (a
new group, in `COMMANDS` too); its use case, in `operators`.

The groups import the operators' use cases inside what they run: `ltm worker` loads none of
them."""

from __future__ import annotations

import argparse
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Final, Protocol

from ltm.commands import (
    audit,
    call,
    console,
    data_rights,
    dlq,
    gateway,
    memory,
    setup,
    worker,
)
from operators.display import ExitCode

__all__ = ["COMMANDS", "CommandGroup", "build_parser"]

PACKAGE: Final = "tomori-ltm"


class CommandGroup(Protocol):
    """A command group's module."""

    def add(self, commands: Any) -> None:
        """Adds the group's commands to `commands` (`ltm`'s subparsers)."""


COMMANDS: Final[tuple[CommandGroup, ...]] = (
    setup,
    worker,
    gateway,
    call,
    dlq,
    audit,
    memory,
    data_rights,
    console,
)

_EPILOG: Final = f"""\
exit codes:
  {ExitCode.OK:<3}  done
  {ExitCode.FAILED:<3}  failed or refused, or a tool call answered success: false
  {ExitCode.USAGE:<3}  usage error: bad arguments, or a file that is not a tool call
  {ExitCode.NOT_FOUND:<3}  not found: the memory, revision or dead letter named does not exist
  {ExitCode.OUTPUT_CLOSED:<3}  the output was closed before the end (| head)

Settings come from the environment (LTM_DATABASE_URL, LTM_AMQP_URL, LTM_AMQP_PREFIX, ...);
tracing from the standard OTEL_* variables (OTEL_EXPORTER_OTLP_ENDPOINT, ...).
`ltm COMMAND --help` describes each command."""


def _package_version() -> str:
    try:
        return version(PACKAGE)
    except PackageNotFoundError:  # pragma: no cover - run from a tree that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ltm",
        description="Long-term-memory update service: the worker, its gateway, and the "
        "operators' commands.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"ltm {_package_version()}",
        help="print the installed version and exit",
    )
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", title="commands"
    )
    for group in COMMANDS:
        group.add(commands)
    return parser
