"""A deployment of least privilege for one test run: the broker accounts of each role (in a
virtual host of the run's own) and a database login role that is a member of that role's
database role only. Processes started with `env(role)` run as that role throughout."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from contracts import Topology
from infra.messaging.accounts import Role
from infra.settings import Settings
from tests.support.accounts import BrokerAccounts, broker_accounts
from tests.support.database_roles import LoginRoles, login_roles

__all__ = ["DATABASE_ROLE", "RoleDeployment", "role_deployment"]

# The database role each broker role's processes run under.
DATABASE_ROLE = {Role.WORKER: "ltm_worker", Role.BOT: "ltm_gateway", Role.OPERATOR: "ltm_operator"}


@dataclass(frozen=True)
class RoleDeployment:
    broker: BrokerAccounts
    database: LoginRoles

    @property
    def topology(self) -> Topology:
        return self.broker.topology

    def settings(self, role: Role) -> Settings:
        return self.broker.settings[role].model_copy(
            update={"database_url": self.database.url(DATABASE_ROLE[role])}
        )

    def env(self, role: Role, **extra: str) -> dict[str, str]:
        """Settings of a process of `role`, over the test run's (`LtmProcess(env=...)`)."""
        settings = self.settings(role)
        return {
            "LTM_AMQP_URL": settings.amqp_url,
            "LTM_DATABASE_URL": settings.database_url,
            "LTM_AMQP_PREFIX": settings.amqp_prefix,
            **extra,
        }

    def user(self, role: Role) -> str:
        return self.broker.users[role]


@contextmanager
def role_deployment(base: Settings, folder: Path, *, label: str) -> Iterator[RoleDeployment]:
    with (
        broker_accounts(base, folder, label=label) as broker,
        login_roles(base.database_url) as database,
    ):
        yield RoleDeployment(broker, database)
