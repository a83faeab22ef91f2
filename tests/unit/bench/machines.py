"""The machine a unit test's bench results describe (`bench.machine.describe`'s shape)."""

from __future__ import annotations

from typing import Any

__all__ = ["machine"]


def machine(load_average: float) -> dict[str, Any]:
    """A 2-core machine whose load average was `load_average` when the run started."""
    return {
        "date": "2026-12-05T10:11:12Z",
        "nproc": 2,
        "cpu_model": "AMD EPYC",
        "memory_mb": 24105,
        "load_average_at_start": [load_average, 0.5, 0.6],
        "postgresql": "15.20 (Debian 15.20-0+deb12u1)",
        "rabbitmq": "3.10.8",
        "python": "3.11.7",
        "libraries": {"aio-pika": "10.2.1", "aiormq": "7.2.4", "psycopg": "3.3.9"},
        "commit": "abc1234",
        "worker_tree_modified": False,
    }
