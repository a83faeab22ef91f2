"""What the figures were measured on: the machine, the services' and libraries' versions."""

from __future__ import annotations

import asyncio
import os
import platform
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import psycopg
from aio_pika.abc import AbstractConnection

from bench.processes import REPO_ROOT

__all__ = ["Settled", "describe", "machine_line", "settle"]

_LIBRARIES = ("aio-pika", "aiormq", "psycopg", "sqlalchemy", "uvloop", "pydantic", "faststream")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_mb() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    except OSError:
        pass
    return None


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


async def describe(database_url: str, connection: AbstractConnection) -> dict[str, Any]:
    """Machine, versions, load and the commit being measured, with the date (UTC)."""
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as db:
        row = await (await db.execute("SHOW server_version")).fetchone()
        postgres = str(row[0]) if row else None
    server = getattr(connection, "transport", None)
    rabbit: str | None = None
    if server is not None:
        properties = getattr(server.connection, "server_properties", {}) or {}
        raw = properties.get("version")
        rabbit = raw.decode() if isinstance(raw, bytes) else (str(raw) if raw else None)
    status = _git("status", "--porcelain", "--", "worker", "contracts", "infra", "operators")
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_model": _cpu_model(),
        "memory_mb": _memory_mb(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "kernel": platform.release(),
        "postgresql": postgres,
        "rabbitmq": rabbit,
        "python": platform.python_version(),
        "libraries": {name: _version(name) for name in _LIBRARIES},
        "commit": _git("rev-parse", "--short", "HEAD"),
        "worker_tree_modified": bool(status) if status is not None else None,
    }


def machine_line(machine: Mapping[str, Any]) -> str:
    """The machine a run measured, in one line (`describe`'s keys; `?` for what is missing):
    when, which commit, the cores, memory, services' and libraries' versions, and the load."""
    date = str(machine.get("date") or "?").replace("T", " ").removesuffix("Z")
    date = date[:16] + " UTC" if date != "?" else date
    commit = machine.get("commit") or "?"
    if machine.get("worker_tree_modified"):
        commit += " (with changes to the service's code not committed)"
    memory = machine.get("memory_mb")
    postgres = str(machine.get("postgresql") or "?").split(" ", 1)[0]
    libraries = machine.get("libraries") or {}
    shown = ", ".join(
        f"{name} {libraries.get(name) or '?'}" for name in ("aio-pika", "aiormq", "psycopg")
    )
    load = machine.get("load_average_at_start") or []
    return (
        f"{date}, commit {commit}: {machine.get('nproc', '?')} cores"
        f" ({machine.get('cpu_model', '?')}), "
        + ("? GB" if memory is None else f"{round(int(memory) / 1024)} GB")
        + f", PostgreSQL {postgres}, RabbitMQ {machine.get('rabbitmq') or '?'},"
        f" Python {machine.get('python', '?')} ({shown}), load average "
        + ("?" if not load else f"{load[0]:.2f}")
        + " at the start"
    )


@dataclass(frozen=True, slots=True)
class Settled:
    """How long `settle` waited, and whether the machine was quiet by then."""

    waited_s: float
    busy_at_start: float  # share of all cores busy just before waiting
    quiet: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "waited_s": round(self.waited_s, 2),
            "busy_at_start": round(self.busy_at_start, 3),
            "quiet": self.quiet,
        }


def _cpu_times() -> tuple[int, int]:
    """(all, idle) jiffies of every core since boot; I/O wait counts as idle."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields), fields[3] + fields[4]


def _busy_since(before: tuple[int, int], after: tuple[int, int]) -> float:
    elapsed = after[0] - before[0]
    return 1.0 - (after[1] - before[1]) / elapsed if elapsed > 0 else 0.0


async def settle(
    *, below: float = 0.10, hold_s: float = 1.0, timeout_s: float = 60.0, step_s: float = 0.25
) -> Settled:
    """Writes out dirty pages, then waits until the machine is quiet for `hold_s`.

    A phase right after a saturating one would otherwise share the cores with its aftermath:
    the kernel writing back what RabbitMQ and PostgreSQL wrote, their own compaction and
    checkpoints. Quiet: under `below` of all cores busy (idle, these services use ~1 %).
    """
    start = time.monotonic()
    before = _cpu_times()
    await asyncio.sleep(step_s)
    previous = _cpu_times()
    busy_at_start = _busy_since(before, previous)
    await asyncio.to_thread(os.sync)
    quiet_since: float | None = None
    while time.monotonic() - start < timeout_s:
        await asyncio.sleep(step_s)
        current = _cpu_times()
        now = time.monotonic()
        if _busy_since(previous, current) >= below:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = now - step_s
        elif now - quiet_since >= hold_s:
            return Settled(now - start, busy_at_start, quiet=True)
        previous = current
    return Settled(time.monotonic() - start, busy_at_start, quiet=False)
