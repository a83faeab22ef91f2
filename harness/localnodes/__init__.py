"""Broker nodes and database instances of our own on this machine, started from Python.

A RabbitMQ cluster (`RabbitCluster`) and a PostgreSQL primary with a synchronous standby
(`PostgresPair`) in folders of ours, on ports of ours, for tests of failover and TLS and for
`make cluster`. The machine's own broker and database are never stopped, reconfigured or
joined: our nodes only register with the machine's epmd, and only pids read from our own
pid files (and whose command line names our folder) are ever signalled.
"""

from harness.localnodes.configuration import TlsFiles
from harness.localnodes.deployment import LocalDeployment
from harness.localnodes.host import LocalNodeError
from harness.localnodes.postgres import PostgresInstance, PostgresPair
from harness.localnodes.rabbit import RabbitCluster, RabbitNode
from harness.localnodes.readings import QuorumMember

__all__ = [
    "LocalDeployment",
    "LocalNodeError",
    "PostgresInstance",
    "PostgresPair",
    "QuorumMember",
    "RabbitCluster",
    "RabbitNode",
    "TlsFiles",
]
