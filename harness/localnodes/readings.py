"""Reading what the tools of RabbitMQ, Erlang and PostgreSQL answer. Pure: text in, facts out."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict

__all__ = [
    "QuorumMember",
    "connection_nodes",
    "epmd_names",
    "pid_from_file_text",
    "quorum_members",
    "running_nodes",
]


class QuorumMember(BaseModel):
    """One replica of a quorum queue, as `rabbitmq-queues quorum_status` reports it."""

    model_config = ConfigDict(frozen=True)

    node: str
    raft_state: str

    @property
    def leads(self) -> bool:
        return self.raft_state == "leader"


def epmd_names(listing: str) -> set[str]:
    """The short names in `epmd -names` ("name ltmc1 at port 25001" lines)."""
    names = set()
    for line in listing.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] == "name":
            names.add(words[1])
    return names


def _key(name: str) -> str:
    return name.strip().lower().replace(" ", "_")


def quorum_members(status_json: str) -> list[QuorumMember]:
    """The members in `quorum_status --formatter json`.

    3.10 answers a list of rows keyed "Node Name" and "Raft State"; later releases add columns
    (membership, last contact, …) and may spell keys differently, so keys are compared loosely.
    """
    rows: Any = json.loads(status_json)
    if not isinstance(rows, list):
        raise ValueError(f"quorum_status did not answer a list: {status_json[:200]!r}")
    members = []
    for row in rows:
        fields = {_key(str(name)): value for name, value in dict(row).items()}
        members.append(
            QuorumMember(node=str(fields["node_name"]), raft_state=str(fields["raft_state"]))
        )
    return members


def connection_nodes(listing: str, connection_name: str) -> list[str]:
    """The nodes holding the connections named `connection_name`, from `rabbitmqctl
    list_connections pid client_properties` (tab-separated): a connection's Erlang pid,
    `<node@host.N.N.N>`, names the node it is on."""
    nodes = []
    for line in listing.splitlines():
        pid, _, properties = line.partition("\t")
        if pid.startswith("<") and f'"{connection_name}"' in properties:
            nodes.append(pid.strip("<>").rsplit(".", 3)[0])
    return nodes


def running_nodes(cluster_status_json: str) -> set[str]:
    """The nodes that `rabbitmqctl cluster_status --formatter json` lists as running."""
    status: Any = json.loads(cluster_status_json)
    return {str(node) for node in status.get("running_nodes", [])}


def pid_from_file_text(text: str) -> int | None:
    """The pid on the first line of a pid file (RabbitMQ's, or PostgreSQL's `postmaster.pid`)."""
    first = text.split("\n", 1)[0].strip()
    return int(first) if first.isdigit() else None
