"""`ltm worker`: run the worker until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
from typing import Any

from infra.settings import Settings
from ltm.commands.common import add_command, run_async

__all__ = ["add"]


def add(commands: Any) -> None:
    worker = add_command(
        commands,
        "worker",
        "run the worker until SIGTERM or SIGINT",
        "On SIGTERM or SIGINT it stops taking calls, drains those in flight (at most "
        "LTM_SHUTDOWN_GRACE_S) and exits 0.",
    )
    worker.set_defaults(run=_run)


def _run(_: argparse.Namespace, settings: Settings) -> int:
    from ltm.composition import run_worker

    return run_async(run_worker(settings))
