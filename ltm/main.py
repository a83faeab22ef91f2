"""`ltm`: the one console script. Thin: it parses, loads the settings, then runs what the
command line's command group gave it to run (`ltm.commands`); a failure to reach a service is
one line, no traceback."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

import aiormq.exceptions
import psycopg
import sqlalchemy.exc
from pydantic import ValidationError

from infra.observability.logs import configure_logging
from infra.observability.tracing import configure_tracing
from infra.redaction import mask_passwords
from infra.settings import Settings, SettingsError
from ltm.commands import build_parser
from ltm.commands.common import Run, UsageProblem
from operators.display import ExitCode

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = Settings()
    except (ValidationError, SettingsError) as error:
        _say(args.command, error)
        return ExitCode.USAGE
    configure_logging(settings.log_level, settings.log_format)
    # OTEL_SERVICE_NAME, when set, names the process instead.
    configure_tracing(f"ltm-{args.command}")
    run: Run = args.run
    try:
        code = run(args, settings)
        # Now, while a closed output can still be told apart: at exit it would be a traceback.
        sys.stdout.flush()
    except UsageProblem as error:
        print(error, file=sys.stderr)
        return ExitCode.USAGE
    except BrokenPipeError:
        return _output_closed()
    except (
        OSError,
        psycopg.OperationalError,
        sqlalchemy.exc.OperationalError,
        aiormq.exceptions.ChannelAccessRefused,
    ) as error:
        # A broker or database that does not answer or refuses this account: one line.
        _say(args.command, error)
        return ExitCode.FAILED
    return code


def _output_closed() -> int:
    """The reader went away (`ltm … | head`): end quietly, as a command killed by SIGPIPE.

    Both outputs point at /dev/null from now on: what is still buffered, and any last log
    line, must not meet the broken pipe again while the interpreter exits.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(devnull, stream.fileno())
        except (OSError, ValueError):  # not a real file (a test's capture): nothing to redirect
            continue
    os.close(devnull)
    return ExitCode.OUTPUT_CLOSED


def _say(command: str, error: BaseException) -> None:
    text = " ".join(str(error).split())  # one line, whatever the library put in
    print(mask_passwords(f"ltm {command}: {type(error).__name__}: {text}"), file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
