"""This machine, as our nodes need it: commands, pid files, signals, free ports.

Only processes of ours are ever signalled: a pid counts as ours when it is alive and its
command line names a folder of ours (a pid file can outlive its process, and pids are reused).
"""

from __future__ import annotations

import os
import pwd
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from harness.localnodes.readings import pid_from_file_text

__all__ = [
    "LocalNodeError",
    "chown_to_postgres",
    "free_port",
    "is_ours",
    "kill_ours",
    "new_base_dir",
    "postgres_command",
    "read_pid",
    "remove_if_empty",
    "run",
    "wait_until",
]

T = TypeVar("T")

POSTGRES_USER = "postgres"


class LocalNodeError(RuntimeError):
    """A node of ours could not be started, reached or stopped; the message says why."""


def run(
    command: Sequence[str | Path],
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
) -> str:
    """Runs `command` to its end and returns its output; a failure names the command and
    quotes what it said."""
    argv = [str(part) for part in command]
    try:
        done = subprocess.run(
            argv,
            env=dict(env) if env is not None else None,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as error:
        raise LocalNodeError(f"{' '.join(argv)} did not finish within {timeout:g}s") from error
    except OSError as error:
        raise LocalNodeError(f"{' '.join(argv)} could not run: {error}") from error
    if done.returncode != 0:
        said = (done.stderr.strip() or done.stdout.strip())[-2000:]
        raise LocalNodeError(f"{' '.join(argv)} exited with {done.returncode}: {said}")
    return done.stdout


def _running_as_root() -> bool:
    return os.geteuid() == 0


def postgres_command(command: Sequence[str | Path]) -> list[str]:
    """PostgreSQL refuses to run as root: as root, run its tools as the `postgres` user."""
    argv = [str(part) for part in command]
    if not _running_as_root():
        return argv
    runuser = shutil.which("runuser")
    if runuser is not None:
        return [runuser, "-u", POSTGRES_USER, "--", *argv]
    return ["su", POSTGRES_USER, "-s", "/bin/sh", "-c", " ".join(map(_shell_quote, argv))]


def _shell_quote(word: str) -> str:
    return "'" + word.replace("'", "'\\''") + "'"


def chown_to_postgres(path: Path) -> None:
    """Gives `path` (not what is in it) to the `postgres` user, when we are root."""
    if _running_as_root():
        account = pwd.getpwnam(POSTGRES_USER)
        os.chown(path, account.pw_uid, account.pw_gid)


def new_base_dir() -> Path:
    """A fresh temporary base folder. Others may pass through it (not list it): the
    PostgreSQL servers run as the `postgres` user and must reach their folders inside."""
    folder = Path(tempfile.mkdtemp(prefix="ltm-nodes-"))
    folder.chmod(0o711)
    return folder.resolve()


def remove_if_empty(folder: Path) -> None:
    """Removes `folder` when nothing is left in it: a base folder `plan` may have made."""
    if folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()


def read_pid(pid_file: Path) -> int | None:
    try:
        return pid_from_file_text(pid_file.read_text())
    except (FileNotFoundError, ValueError):
        return None


def is_ours(pid: int | None, marker: Path) -> bool:
    """Whether `pid` is alive and its command line names `marker` (a folder of ours)."""
    if pid is None or pid <= 1:
        return False
    try:
        command_line = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return str(marker).encode() in command_line.split(b"\0")


def kill_ours(pid: int | None, marker: Path, *, timeout: float = 10.0) -> bool:
    """SIGKILL to `pid` if it is ours; returns once it is gone. False when it was not running."""
    if pid is None or not is_ours(pid, marker):
        return False
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    wait_until(lambda: not is_ours(pid, marker), timeout=timeout, what=f"pid {pid} to end")
    return True


def wait_until(
    probe: Callable[[], T | None],
    *,
    timeout: float,
    what: str,
    interval: float = 0.2,
) -> T:
    """Polls `probe` until it returns something other than None or False; fails at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            raise LocalNodeError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


def _port_ceiling() -> int:
    """The first port the kernel hands out to outgoing connections: ours stay below it, so
    that no connection made meanwhile takes a port between its choice and its use."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    return max(low, 21000)


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(taken: set[int], *, start: int | None = None) -> int:
    """A port nothing listens on and not in `taken` (which it joins): from `start` upwards when
    given, else a random one between 20000 and the outgoing range."""
    if start is not None:
        candidates: Sequence[int] = range(start, 65536)
    else:
        candidates = random.sample(range(20000, _port_ceiling()), k=200)
    for port in candidates:
        if port not in taken and _bindable(port):
            taken.add(port)
            return port
    raise LocalNodeError(f"no free port found (from {start or 'random'})")
