"""The `ltm` command line: every command group's options, and the typed command a parsed
command line stands for (`command_of`)."""

from __future__ import annotations

import argparse
from importlib.metadata import PackageNotFoundError, version
from typing import Final

from ltm.arguments.audit import add_audit
from ltm.arguments.call import add_call
from ltm.arguments.common import UsageProblem
from ltm.arguments.dead_letters import add_dlq
from ltm.arguments.memory import add_memory
from ltm.arguments.processes import add_console, add_gateway, add_setup, add_worker
from ltm.processes import Command
from worker.ops.output import ExitCode

__all__ = ["UsageProblem", "build_parser", "command_of"]

PACKAGE: Final = "tomori-ltm"

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
    add_setup(commands)
    add_worker(commands)
    add_gateway(commands)
    add_call(commands)
    add_dlq(commands)
    add_audit(commands)
    add_memory(commands)
    add_console(commands)
    return parser


def command_of(args: argparse.Namespace) -> Command:
    """The typed command of a command line `build_parser` parsed. Raises `UsageProblem` for
    an argument the command cannot take (argparse's own errors exit with code 2 before)."""
    command: Command = args.build(args)
    return command
