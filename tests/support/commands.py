"""Operator commands (`ltm call`, `ltm dlq`, `ltm audit`, ...) run as real processes, to the end.

Run in a thread, so that the consumers and taps sharing the test's event loop keep going.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from harness.services import TestServices

__all__ = ["Finished", "run_ltm", "run_ltm_into_closed_pipe", "run_ltm_into_head"]

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
    return [sys.executable, "-m", "ltm", *args]


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


async def run_ltm_into_closed_pipe(
    services: TestServices, *args: str, stderr_too: bool = False, **env: str
) -> Finished:
    """`ltm ARGS | reader` whose reader went away before the command wrote a byte: its first
    write to stdout (and, with `stderr_too`, as in `2>&1 |`, to stderr) meets a broken pipe."""

    def run() -> Finished:
        read_end, write_end = os.pipe()
        os.close(read_end)
        try:
            process = subprocess.Popen(
                _command(args),
                env=services.env(**env),
                stdin=subprocess.DEVNULL,
                stdout=write_end,
                stderr=write_end if stderr_too else subprocess.PIPE,
                cwd=_ROOT,
            )
        finally:
            os.close(write_end)
        try:
            _, stderr = process.communicate(timeout=COMMAND_DEADLINE_S)
        finally:
            process.kill()
        return Finished(process.returncode, "", (stderr or b"").decode(errors="replace"))

    return await asyncio.to_thread(run)


async def run_ltm_into_head(services: TestServices, *args: str, **env: str) -> Finished:
    """`ltm ARGS | head -n 1`: `stdout` is what head printed, `stderr` the command's."""

    def run() -> Finished:
        command = subprocess.Popen(
            _command(args),
            env=services.env(**env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=_ROOT,
        )
        assert command.stdout is not None and command.stderr is not None
        try:
            head = subprocess.run(
                ["head", "-n", "1"],
                stdin=command.stdout,
                capture_output=True,
                timeout=COMMAND_DEADLINE_S,
                check=True,
            )
            command.stdout.close()  # head's end is the only reader left, and it is gone
            stderr = command.stderr.read()
            code = command.wait(timeout=COMMAND_DEADLINE_S)
        finally:
            command.kill()
            command.stderr.close()
        return Finished(code, head.stdout.decode(errors="replace"), stderr.decode(errors="replace"))

    return await asyncio.to_thread(run)
