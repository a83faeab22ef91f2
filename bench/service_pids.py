"""The pids of the machine's broker and database server, for `bench.cpu`: read-only, from the
servers' pid files and /proc; nothing here signals or changes a process.

The broker is the process that listens on the bench's AMQP port (found through
/proc/net/tcp and the processes' open sockets), else the Erlang VM named in RabbitMQ's own
pid file. The database server is the parent of the bench's own backend: the postmaster.
"""

from __future__ import annotations

import os
import socket
import urllib.parse
from collections.abc import Iterable
from pathlib import Path
from typing import Final

import psycopg

__all__ = [
    "broker_pid",
    "listening_inodes",
    "postmaster_pid",
    "rabbit_pid_file",
]

PROC: Final = Path("/proc")
_LISTEN: Final = "0A"  # TCP_LISTEN in /proc/net/tcp's `st` column


def listening_inodes(table: str, port: int) -> set[int]:
    """The socket inodes of /proc/net/tcp (or tcp6) text that listen on `port`."""
    inodes = set()
    for line in table.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10:
            continue
        local_port = int(fields[1].rsplit(":", 1)[1], 16)
        if local_port == port and fields[3] == _LISTEN:
            inodes.add(int(fields[9]))
    return inodes


def _owner_of(inodes: set[int]) -> int | None:
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            for descriptor in (entry / "fd").iterdir():
                if os.readlink(descriptor) in wanted:
                    return int(entry.name)
        except OSError:
            continue  # ended, or not ours to read
    return None


def _listener_pid(port: int) -> int | None:
    inodes: set[int] = set()
    for table in ("tcp", "tcp6"):
        try:
            inodes |= listening_inodes((PROC / "net" / table).read_text(), port)
        except OSError:
            continue
    return _owner_of(inodes) if inodes else None


def rabbit_pid_file(env_conf: str) -> Path:
    """Where the machine's RabbitMQ writes its pid: `<mnesia base>/<node>.pid`, from its
    `rabbitmq-env.conf` text (NODENAME, MNESIA_BASE), else RabbitMQ's defaults."""
    settings: dict[str, str] = {}
    for line in env_conf.splitlines():
        key, _, value = line.strip().removeprefix("export ").partition("=")
        if value:
            settings[key.removeprefix("RABBITMQ_")] = value.strip("'\"")
    node = settings.get("NODENAME") or "rabbit@" + socket.gethostname().split(".")[0]
    base = settings.get("MNESIA_BASE") or "/var/lib/rabbitmq/mnesia"
    return Path(base) / f"{node}.pid"


def _pid_file_pid() -> int | None:
    conf = Path("/etc/rabbitmq/rabbitmq-env.conf")
    try:
        text = rabbit_pid_file(conf.read_text() if conf.exists() else "").read_text()
        pid = int(text.split()[0])
        alive = (PROC / str(pid) / "comm").read_text().strip() == "beam.smp"
    except (OSError, ValueError, IndexError):
        return None
    return pid if alive else None


def broker_pid(amqp_url: str) -> int:
    """The broker the bench talks to, when it runs on this machine."""
    parts = urllib.parse.urlsplit(amqp_url.split(",", maxsplit=1)[0])
    pid = _listener_pid(parts.port or 5672) or _pid_file_pid()
    if pid is None:
        raise RuntimeError(f"no process of this machine is the broker of {parts.hostname}")
    return pid


async def postmaster_pid(database_url: str) -> int:
    """The PostgreSQL server's main process: the parent of a backend of ours."""
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as db:
        row = await (await db.execute("SELECT pg_backend_pid()")).fetchone()
        assert row is not None
        return _parent_of(int(row[0]), (PROC / str(row[0]) / "status").read_text().splitlines())


def _parent_of(pid: int, status: Iterable[str]) -> int:
    for line in status:
        if line.startswith("PPid:"):
            return int(line.split()[1])
    raise RuntimeError(f"no parent in /proc/{pid}/status")
