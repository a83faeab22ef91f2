"""Operator commands (`ltm call`, `ltm dlq`, `ltm audit`, ...) run as real processes, to the end.

Run in a thread, so that the consumers and taps sharing the test's event loop keep going.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.support.services import TestServices

__all__ = ["Finished", "run_ltm"]

_ROOT = Path(__file__).resolve().parents[2]
# Generous: a command that hangs fails the test here instead of hanging the run.
COMMAND_DEADLINE_S = 60.0


@dataclass(frozen=True)
class Finished:
    """What a finished command left: its exit code and its two outputs."""

    code: int
    stdout: str
    stderr: str


def _command(args: tuple[str, ...]) -> list[str]:
    return [sys.executable, "-m", "worker.cli", *args]


async def run_ltm(services: TestServices, *args: str, stdin: str = "", **env: str) -> Finished:
    """`ltm ARGS` with the test run's settings (`env` overrides some), `stdin` as its input."""

    def run() -> Finished:
        done = subprocess.run(
            _command(args),
            env=services.env(**env),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=COMMAND_DEADLINE_S,
            check=False,
            cwd=_ROOT,
        )
        return Finished(done.returncode, done.stdout, done.stderr)

    return await asyncio.to_thread(run)
