"""Broker nodes and PostgreSQL instances of a run's own (`harness.localnodes`), for the tests and
the bench alike: started for a block and stopped however it ends, under node names of the run's
own; and who the machine's own broker and database are, which ours must never change.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg

from harness.localnodes import PostgresPair, RabbitCluster
from harness.services import DEFAULT_DATABASE_URL, rabbitmqctl

__all__ = ["MachineServices", "run_prefix", "started_cluster", "started_pair"]


def run_prefix() -> str:
    """Node names of this run (`ltmt1a2b3c1@localhost`): never those of `make cluster` or of
    another run on the machine."""
    return f"ltmt{uuid.uuid4().hex[:6]}"


@contextmanager
def started_cluster(**plan: Any) -> Iterator[RabbitCluster]:
    """A cluster of our own (`RabbitCluster.plan` arguments) for the block; stopped and its
    folders removed however the block ends."""
    cluster = RabbitCluster.plan(**{"prefix": run_prefix(), **plan})
    try:
        yield cluster.start()
    finally:
        cluster.stop()


@contextmanager
def started_pair(**plan: Any) -> Iterator[PostgresPair]:
    """A PostgreSQL pair (or, with `standby=False`, one instance) of our own for the block."""
    pair = PostgresPair.plan(**plan)
    try:
        yield pair.start()
    finally:
        pair.stop()


@dataclass(frozen=True)
class MachineServices:
    """Who the machine's own broker and database are: pids and start times, and the members
    of the broker's cluster. Ours must never change them."""

    rabbit_node: str
    rabbit_pid: str
    rabbit_cluster: frozenset[str]
    postgres_pid: int
    postgres_started: datetime

    @classmethod
    def now(cls) -> MachineServices:
        node = _machine_rabbit_node()
        status = json.loads(rabbitmqctl("-n", node, "status", "--formatter", "json").stdout)
        cluster = json.loads(
            rabbitmqctl("-n", node, "cluster_status", "--formatter", "json").stdout
        )
        with psycopg.connect(os.environ.get("LTM_DATABASE_URL", DEFAULT_DATABASE_URL)) as db:
            row = db.execute("SELECT pg_backend_pid(), pg_postmaster_start_time()").fetchone()
            assert row is not None
            backend, started = row
            postmaster = _parent_pid(int(backend))  # while the backend still exists
        return cls(
            rabbit_node=node,
            rabbit_pid=str(status["pid"]),
            rabbit_cluster=frozenset(cluster["disk_nodes"]) | frozenset(cluster["running_nodes"]),
            postgres_pid=postmaster,
            postgres_started=started,
        )


def _machine_rabbit_node() -> str:
    """The node the machine's service runs: as its `rabbitmq-env.conf` names it, else
    RabbitMQ's default, rabbit@<short host name>."""
    env_conf = Path("/etc/rabbitmq/rabbitmq-env.conf")
    if env_conf.exists():
        for line in env_conf.read_text().splitlines():
            key, _, value = line.strip().partition("=")
            if key in ("NODENAME", "RABBITMQ_NODENAME") and value:
                return value.strip("'\"")
    return "rabbit@" + os.uname().nodename.split(".")[0]


def _parent_pid(pid: int) -> int:
    """A backend's parent: the postmaster (the server is on this machine)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("PPid:"):
            return int(line.split()[1])
    raise AssertionError(f"no parent found for pid {pid}")
