"""What the figures were measured on: the machine, the services' and libraries' versions."""

from __future__ import annotations

import os
import platform
import subprocess
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import psycopg
from aio_pika.abc import AbstractConnection

from bench.processes import REPO_ROOT

__all__ = ["describe"]

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
    status = _git("status", "--porcelain", "--", "worker", "contracts", "infra")
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
