"""Our nodes never touch the machine's own broker and database."""

from __future__ import annotations

import pytest

from harness.localnodes import PostgresPair, RabbitCluster
from harness.localnodes.running import MachineServices

pytestmark = pytest.mark.localnodes


def test_the_machines_own_broker_and_database_run_as_before(
    machine_services: MachineServices,
    rabbit_cluster: RabbitCluster,
    postgres_pair: PostgresPair,
) -> None:
    """The same pids and start time as before our nodes started (the session's fixture checks
    once more after they have all stopped); the machine's broker still a cluster of one."""
    now = MachineServices.now()

    assert now == machine_services
    assert now.rabbit_cluster == {machine_services.rabbit_node}
    assert not {node.name for node in rabbit_cluster.nodes} & now.rabbit_cluster
    assert machine_services.postgres_pid not in {
        instance.pid for instance in postgres_pair.instances
    }
