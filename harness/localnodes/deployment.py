"""What `make cluster` runs: three broker nodes and a PostgreSQL pair under one folder."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from harness.localnodes import state
from harness.localnodes.postgres import PostgresPair
from harness.localnodes.rabbit import RabbitCluster

__all__ = ["LocalDeployment"]

# The database the service's URL names: `ltm migrate` creates it on the primary.
DATABASE = "ltm"


class LocalDeployment:
    """A broker cluster and a database pair, started together and recorded in one state file,
    so that `down`, in another process, stops exactly them."""

    def __init__(
        self, base_dir: Path, rabbit: RabbitCluster | None, postgres: PostgresPair | None
    ) -> None:
        self.base_dir = base_dir
        self.rabbit = rabbit
        self.postgres = postgres

    @classmethod
    def up(
        cls,
        base_dir: Path,
        *,
        prefix: str = "ltmc",
        nodes: int = 3,
        base_port: int | None = None,
    ) -> LocalDeployment:
        base = base_dir.resolve()
        rabbit = RabbitCluster.plan(base, prefix=prefix, size=nodes, base_port=base_port)
        # From the port after the broker's, when counting up: the two never ask for the same.
        after = max(p for n in rabbit.spec.nodes for p in (n.amqp_port, n.dist_port)) + 1
        postgres = PostgresPair.plan(base, base_port=after if base_port is not None else None)
        deployment = cls(base, rabbit, postgres)
        try:
            rabbit.start()
            postgres.start()
        except BaseException:
            deployment.down()
            raise
        return deployment

    @classmethod
    def recorded(cls, base_dir: Path) -> LocalDeployment | None:
        base = base_dir.resolve()
        rabbit = RabbitCluster.recorded(base)
        postgres = PostgresPair.recorded(base)
        if rabbit is None and postgres is None:
            return None
        return cls(base, rabbit, postgres)

    def down(self) -> None:
        """Stops both parts and removes their folders; the base folder too once it is empty."""
        if self.postgres is not None:
            self.postgres.stop()
        if self.rabbit is not None:
            self.rabbit.stop()
        if self.base_dir.exists() and not state.recorded(self.base_dir):
            leftovers = [p for p in self.base_dir.iterdir() if p.name != ".gitignore"]
            if not leftovers:
                shutil.rmtree(self.base_dir)

    @property
    def running(self) -> bool:
        nodes = self.rabbit.nodes if self.rabbit is not None else []
        instances = self.postgres.instances if self.postgres is not None else []
        return all(node.is_running for node in nodes) and all(
            instance.is_running for instance in instances
        )

    def environment(self) -> dict[str, str]:
        """The settings that point the service at this deployment."""
        env = {}
        if self.rabbit is not None:
            env["LTM_AMQP_URL"] = ",".join(self.rabbit.amqp_urls())
            if len(self.rabbit.nodes) > 1:  # a replica of every queue on each node
                env["LTM_AMQP_REPLICAS"] = str(len(self.rabbit.nodes))
        if self.postgres is not None:
            env["LTM_DATABASE_URL"] = self.postgres.url(DATABASE)
        return env

    def describe(self) -> dict[str, Any]:
        return {
            "base_dir": str(self.base_dir),
            "running": self.running,
            "rabbit": self.rabbit.describe() if self.rabbit is not None else None,
            "postgres": self.postgres.describe() if self.postgres is not None else None,
            "environment": self.environment(),
        }
